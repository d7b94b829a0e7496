"""Time to target against throughput: one sweep's jobs ranked both ways (benchmarks/time_to_target.sh).

A sweep folder SWEEP holds report.csv ranked by time to the target; SWEEP-throughput, a copy re-ranked
with ``python -m fastpipe.report SWEEP-throughput --objective throughput``, the same jobs by throughput.

    python benchmarks/lib/rankings.py SWEEP                  # both rankings, and whether the winners agree
    python benchmarks/lib/rankings.py --table WORK WALLS     # target.md: WORK/grid and WORK/halving side by side
"""
from __future__ import annotations

import csv
import re
import sys
from pathlib import Path


def rows(folder: Path) -> list:
    """The report.csv rows of a sweep folder ([] when it has none yet)."""
    try:
        with open(folder / "report.csv") as fh:
            return list(csv.DictReader(fh))
    except OSError:
        return []


def throughput_copy(sweep: Path) -> Path:
    return sweep.with_name(sweep.name + "-throughput")


def print_rankings(sweep: Path) -> None:
    """Both rankings of the sweep's jobs, each winner, and how many reached jobs hold the same place."""
    by_time, by_rate = rows(sweep), rows(throughput_copy(sweep))
    label = lambda r: f"#{r['job']}"  # noqa: E731
    time_order = [label(r) for r in by_time if r["target_reached"] == "True"]
    rate_order = [label(r) for r in by_rate if r["throughput"]]
    win_time = next((label(r) for r in by_time if r["best"] == "True"), None)
    win_rate = next((label(r) for r in by_rate if r["best"] == "True"), None)
    print(f"time-to-target ranking (reached only): {' '.join(time_order)}")
    print(f"throughput ranking:                    {' '.join(rate_order)}")
    same = [a == b for a, b in zip(time_order, [x for x in rate_order if x in time_order])]
    print(f"winner by time to target: {win_time}; winner by throughput (parity rule): {win_rate}; "
          + ("the winners agree" if win_time == win_rate else "the winners DISAGREE")
          + f"; {sum(same)} of {len(same)} reached jobs hold the same place in both rankings")
    if win_time and win_rate and win_time != win_rate:
        t = next(r for r in by_time if label(r) == win_time)
        w = next(r for r in by_time if label(r) == win_rate)

        def reached(r):
            return (f"in {float(r['time_to_target_s']):.1f} s" if r["time_to_target_s"]
                    else f"not reached in {float(r['target_seconds']):.1f} s")

        print(f"  {win_time}: {float(t['throughput']):,.1f} samples/s, target {reached(t)}; "
              f"{win_rate}: {float(w['throughput']):,.1f} samples/s, target {reached(w)}")


def print_table(work: Path, walls: Path) -> None:
    """target.md: each sweep's wall time (all its segments), its winner by time to target and by
    throughput, and whether the two rankings agree."""
    text = walls.read_text() if walls.is_file() else ""
    print("# Time to target on one H200: grid and halving\n")
    print("| sweep | wall time (s, all segments) | finished | winner (time to target) | its time (s) "
          "| winner by throughput | rankings |")
    print("|---|---|---|---|---|---|---|")
    for name in ("grid", "halving"):
        segs = [float(s) for s in re.findall(rf"^{name} segment: ([0-9.]+) s", text, re.M)]
        if not segs:
            continue
        by_time, by_rate = rows(work / name), rows(work / f"{name}-throughput")
        label = lambda r: f"#{r['job']} " + " ".join(  # noqa: E731
            o for o in r["overrides"].split() if o.split("=")[0] in ("compile", "train.batch_size", "+resize"))
        win = next((r for r in by_time if r["best"] == "True"), None)
        rate = next((r for r in by_rate if r["best"] == "True"), None)
        order_t = [r["job"] for r in by_time if r["target_reached"] == "True"]
        order_r = [r["job"] for r in by_rate if r["throughput"] and r["job"] in order_t]
        agree = ("n/a: none reached the target" if not order_t else "agree" if order_t == order_r else
                 f"disagree (time: {' '.join(order_t)}; throughput: {' '.join(order_r)})")
        finished = (work / f"{name}.done").is_file()
        winner = (f"{label(win)} | {float(win['time_to_target_s']):,.1f}" if win else "none | n/a")
        print(f"| {name} | {sum(segs):,.0f} ({len(segs)}) | {finished} | {winner} | "
              f"{label(rate) if rate else 'none'} | {agree} |")
    print()
    for line in text.splitlines():
        if line.startswith("prep"):
            print(f"- {line}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--table"]:
        print_table(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        print_rankings(Path(sys.argv[1]))
