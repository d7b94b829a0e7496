"""benchmarks/lib/rankings.py: a sweep's jobs ranked by time to target beside the same jobs by throughput,
as time_to_target.sh prints them (both machines)."""
from __future__ import annotations

import csv

from conftest import load_benchmark_lib

FIELDS = ["job", "overrides", "throughput", "best", "target_reached", "time_to_target_s", "target_seconds"]


def _rankings():
    return load_benchmark_lib("rankings")


def _report(folder, rows):
    folder.mkdir()
    with open(folder / "report.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(dict(zip(FIELDS, row)) for row in rows)


def _sweep(tmp_path, name="grid"):
    """Job 1 reaches the target first although job 0 trains fastest per sample; job 2 never reaches it."""
    jobs = {"0": ("0", "compile=off train.batch_size=256", "100.0", "False", "True", "20.0", "20.0"),
            "1": ("1", "compile=off train.batch_size=512", "90.0", "False", "True", "10.0", "10.0"),
            "2": ("2", "compile=default train.batch_size=256", "80.0", "False", "False", "", "30.0")}
    best = lambda row: row[:3] + ("True",) + row[4:]  # noqa: E731
    _report(tmp_path / name, [best(jobs["1"]), jobs["0"], jobs["2"]])  # ranked by time to target
    _report(tmp_path / f"{name}-throughput", [best(jobs["0"]), jobs["1"], jobs["2"]])  # the same jobs by throughput
    return tmp_path / name


def test_rankings_name_both_winners_and_where_they_disagree(tmp_path, capsys):
    _rankings().print_rankings(_sweep(tmp_path))
    assert capsys.readouterr().out.splitlines() == [
        "time-to-target ranking (reached only): #1 #0",
        "throughput ranking:                    #0 #1 #2",
        "winner by time to target: #1; winner by throughput (parity rule): #0; the winners DISAGREE; "
        "0 of 2 reached jobs hold the same place in both rankings",
        "  #1: 90.0 samples/s, target in 10.0 s; #0: 100.0 samples/s, target in 20.0 s"]


def test_the_h200_table_has_a_row_per_timed_sweep(tmp_path, capsys):
    _sweep(tmp_path)
    walls = tmp_path / "sweep-wall.txt"
    walls.write_text("prep (JPEG folder + pack): 6 s\ngrid segment: 27.2 s wall (exit 75)\n"
                     "grid segment: 30.0 s wall (exit 0, finished)\n")
    (tmp_path / "grid.done").touch()
    _rankings().print_table(tmp_path, walls)
    lines = capsys.readouterr().out.splitlines()
    assert ("| grid | 57 (2) | True | #1 compile=off train.batch_size=512 | 10.0 | "
            "#0 compile=off train.batch_size=256 | disagree (time: 1 0; throughput: 0 1) |") in lines
    assert not [line for line in lines if line.startswith("| halving")]  # no segment timed: no row
    assert lines[-1] == "- prep (JPEG folder + pack): 6 s"
