"""optimizer.lr=auto against given learning rates, by time to target on the 2-core CPU (issue 32's proof).

1. image: the default task (TinyCNN on the built-in shapes, AdamW, cosine, batch 64) to held-out
   accuracy 0.95, evaluated every 10 steps, at most 6 epochs: benchmarks/cpu_target.sh's target. Each
   rule (train.lr_find_rule=valley,steepest,min_div10) with optimizer.lr=auto, and a 4-point log grid of
   given rates (--grid), every job with report.repeats=--seeds (repeat K trains with seed K, so the rules
   and the grid are paired by seed; each repeat runs its own range test from its own seed). Per job: the
   rate(s) it trained at, its median time to target over the seeds (a seed that missed counts as slower
   than every one that reached, MLPerf's rule; a median that missed is "not reached"), on the training
   clock (the report's) and end to end (the range test included), and how many seeds reached it. The
   last lines compare each rule's median with the grid's best (the goal: valley within 1.5x).
2. lm: the byte-level LM (task=lm dataset=tokens model=gpt_tiny) to a held-out loss of 2.0 nats per
   byte, checked every 100 steps on the first 1,024 held-out windows, at most 1,500 steps:
   optimizer.lr=auto (valley) beside three given rates (--lm-rates), one seed each.

The datasets are built once before the clocks start (a one-step run of each task). Every sweep is a
fresh `python -m fastpipe -m` through runner.py; rows are written as each sweep ends.

Writes to --out: lr_find.md (the tables and the verdicts), lr_find.jsonl (one row per job, with each
seed's rate and times), lr_find.log (every command's output), and the sweep folders.

    python benchmarks/lr_find.py --out /tmp/lr_find                      # both phases, on a quiet machine
    python benchmarks/lr_find.py --out /tmp/lr_find --phases lm
    python benchmarks/lr_find.py --out /tmp/lr_find --smoke              # tiny, a minute: checks the script
Run it on an idle machine (uptime's load below 1) with OMP_NUM_THREADS=1, as cpu_target.sh.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from lib.runner import (add_common_args, append_jsonl, Deadline, header, read_json, run_fastpipe, skipped,
                        write_markdown_table)

RULES = ("valley", "steepest", "min_div10")
IMAGE = ["report.objective=time_to_target", "train.target=0.95", "train.eval_every=10", "train.epochs=6"]
LM = ["task=lm", "dataset=tokens", "model=gpt_tiny", "report.objective=time_to_target", "train.target=2.0",
      "train.eval_every=100", "train.target_eval_samples=1024", "train.epochs=10", "train.max_steps=1500",
      "train.batch_size=32"]
# --smoke: the same sweeps, tiny (a few steps, an easy target), to check the script, not the rules
SMOKE_IMAGE = ["report.objective=time_to_target", "train.target=0.3", "train.eval_every=4", "train.max_steps=12",
               "dataset.num_images=240", "dataset.image_size=16", "train.batch_size=16", "measure.warmup_steps=2",
               "measure.window=3", "data.num_workers=0", "train.lr_find_steps=10"]
SMOKE_LM = ["task=lm", "dataset=tokens", "model=gpt_tiny", "report.objective=time_to_target", "train.target=5.0",
            "train.eval_every=4", "train.max_steps=8", "train.batch_size=8", "train.eval_batches=2",
            "measure.warmup_steps=2", "measure.window=3", "data.num_workers=0", "train.lr_find_steps=10"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--phases", default="image,lm", help="image, lm or both (comma-separated)")
    p.add_argument("--seeds", type=int, default=3, help="report.repeats of the image phase's jobs")
    p.add_argument("--grid", default="0.001,0.003,0.01,0.03", help="the image phase's given rates")
    p.add_argument("--lm-rates", default="0.001,0.003,0.01", help="the lm phase's given rates")
    p.add_argument("--smoke", action="store_true", help="tiny runs and 2 seeds: checks the script, not the rules")
    add_common_args(p, timeout_s=3600)
    a = p.parse_args(argv)
    a.phases = [x for x in a.phases.split(",") if x]
    if a.smoke:
        a.seeds, a.grid, a.lm_rates = 2, "0.001,0.01", "0.003"
    return a


def seed_runs(job_dir: Path, job: dict) -> list:
    """Each seed's (rate, training-clock seconds, end-to-end seconds, reached) of a job: its repeat folders'
    records, or the job's own when it ran once."""
    dirs = [job_dir / d for d in (job.get("repeats") or {}).get("dirs", [])] or [job_dir]
    runs = []
    for folder in dirs:
        m = read_json(folder / "metrics.json") or {}
        target, search = m.get("target") or {}, m.get("lr_search")
        rate = search["suggestion"] * search["factor"] if search else _given_rate(m.get("overrides") or [])
        runs.append({"lr": rate, "seconds": target.get("seconds"), "end_to_end": target.get("seconds_end_to_end"),
                     "reached": bool(target.get("reached")), "status": m.get("status", "failed"),
                     "test_s": search and search["seconds"]})
    return runs


def _given_rate(overrides: list):
    value = next((o.split("=", 1)[1] for o in overrides if o.startswith("optimizer.lr=")), None)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def median_time(runs: list, key: str):
    """The median over the seeds, a miss slower than every reach; None when the median seed missed."""
    times = sorted(r[key] if r["reached"] and r[key] is not None else math.inf for r in runs)
    if not times:
        return None
    mid = len(times) // 2
    centre = times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2
    return None if math.isinf(centre) else centre


def job_row(phase: str, label: str, job_dir: Path, job: dict) -> dict:
    runs = seed_runs(job_dir, job)
    rates = [r["lr"] for r in runs]
    return {"phase": phase, "job": label, "status": job.get("status"), "reason": job.get("reason"),
            "lr": ", ".join("—" if x is None else f"{x:.3g}" for x in rates), "rates": rates,
            "median_s": median_time(runs, "seconds"), "median_end_to_end_s": median_time(runs, "end_to_end"),
            "reached": f"{sum(r['reached'] for r in runs)}/{len(runs)}", "runs": runs,
            "test_s": next((r["test_s"] for r in runs if r["test_s"]), None)}


def sweep(a, log, deadline: Deadline, name: str, overrides: list, label) -> list:
    """One `python -m fastpipe -m` sweep into --out/NAME: a row per job (``label(job's metrics)`` names it)."""
    reason = deadline.skip_reason("sweep")
    if reason:
        return [skipped(reason, phase=name, job=name)]
    folder = a.out / name
    done = run_fastpipe([*overrides, "runtime.progress=false"], folder, deadline.timeout(a.timeout), log,
                        multirun=True)
    deadline.record("sweep", done.get("wall_s"))
    jobs = sorted((p for p in folder.glob("[0-9]*") if (p / "metrics.json").exists()), key=lambda p: int(p.name))
    if not jobs:
        return [{"phase": name, "job": name, "status": "failed", "reason": done.get("reason")}]
    return [job_row(name, label(read_json(p / "metrics.json") or {}), p, read_json(p / "metrics.json") or {})
            for p in jobs]


def label_of(job: dict) -> str:
    search = job.get("lr_search")
    if search:
        return f"auto: {search['rule']}" + (f" x {search['factor']:g}" if search["factor"] != 1 else "")
    return f"lr {_given_rate(job.get('overrides') or [])}"


def verdicts(rows: list) -> list:
    """Each found rate's median against the best median of the given rates: the image phase's rules against
    its grid (the goal: valley within 1.5x), the lm phase's suggestion against its three rates."""
    lines = []
    for found_in, given_in in (("image-rules", "image-grid"), ("lm", "lm")):
        found = [r for r in rows if r.get("phase") == found_in and str(r.get("job")).startswith("auto")]
        given = [r["median_s"] for r in rows if r.get("phase") == given_in and str(r.get("job")).startswith("lr ")
                 and r.get("median_s")]
        if not found:
            continue
        if not given:
            lines.append(f"- {given_in}: no given rate reached the target at its median: no comparison")
            continue
        best = min(given)
        lines.append(f"- {given_in}: the best given rate's median: {best:.1f} s (training clock)")
        for r in found:
            goal = " (goal: within 1.5x)" if found_in == "image-rules" and "valley" in r["job"] else ""
            lines.append(f"- {found_in} {r['job']}: {r['median_s'] / best:.2f}x that{goal}" if r.get("median_s")
                         else f"- {found_in} {r['job']}: its median seed did not reach the target")
    return lines


def prime(a, log, deadline: Deadline, task: list, name: str) -> None:
    """A one-step run of ``task``, so that building its dataset is on no clock."""
    run_fastpipe([*task, "train.max_steps=1", "measure.warmup_steps=1", "runtime.progress=false"],
                 a.out / f"prime-{name}", deadline.timeout(600), log)


def main(argv=None) -> int:
    a = parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    deadline, rows = Deadline(a.deadline, floor_s=60.0), []
    image, lm = (SMOKE_IMAGE, SMOKE_LM) if a.smoke else (IMAGE, LM)
    title = header(a.smoke)
    columns = [("phase", "phase"), ("job", "job"), ("lr (each seed)", "lr"),
               ("median time to target (s)", "median_s", ".1f"), ("end to end (s)", "median_end_to_end_s", ".1f"),
               ("reached", "reached"), ("range test (s)", "test_s", ".1f"), ("status", "status")]

    def write():
        write_markdown_table(a.out / "lr_find.md", rows, columns, title=title, notes=verdicts(rows))

    with open(a.out / "lr_find.log", "a") as log:
        if "image" in a.phases:
            prime(a, log, deadline, image, "image")
            repeats = [f"report.repeats={a.seeds}"]
            for name, extra in (("image-rules", ["optimizer.lr=auto", f"train.lr_find_rule={','.join(RULES)}"]),
                                ("image-grid", [f"optimizer.lr={a.grid}"])):
                for row in sweep(a, log, deadline, name, [*image, *repeats, *extra], label_of):
                    rows.append(row)
                    append_jsonl(a.out / "lr_find.jsonl", row)
                write()
        if "lm" in a.phases:
            prime(a, log, deadline, lm, "lm")
            for row in sweep(a, log, deadline, "lm", [*lm, f"optimizer.lr=auto,{a.lm_rates}"], label_of):
                rows.append(row)
                append_jsonl(a.out / "lr_find.jsonl", row)
            write()
    write()
    print((a.out / "lr_find.md").read_text(), flush=True)
    return 0 if rows and all(r.get("status") == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
