"""report.objective=time_to_target: ranking, not-reached rows, a baseline that missed, ties, files (issue 22)."""
from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

from omegaconf import OmegaConf

from fastpipe.report.publish import write_report
from fastpipe.report.sweep_folder import SweepSpec

LRS = ["0.001", "0.003", "0.01", "0.03"]


def target(seconds, reached, best=0.9, steps=100, repeats=None):
    t = {"metric": "accuracy", "value": 0.95, "higher_is_better": True, "reached": reached, "seconds": seconds,
         "seconds_end_to_end": seconds + 10.0, "steps": steps, "samples": steps * 64,
         "reached_value": 0.951 if reached else None, "best_value": 0.951 if reached else best, "eval_every": 10,
         "eval_samples": None, "curve": [{"step": 10, "seconds": seconds / 2, "value": 0.5, "subset": False},
                                         {"step": steps, "seconds": seconds, "value": 0.951 if reached else best,
                                          "subset": False}]}
    if repeats:
        t["repeats"] = {"seconds": [r for r, _ in repeats], "seconds_end_to_end": [r + 10.0 for r, _ in repeats],
                        "reached": [hit for _, hit in repeats]}
    return t


def job(folder: Path, num: int, throughput: float, t: dict) -> None:
    overrides = [f"optimizer.lr={LRS[num]}", "train.target=0.95", "train.eval_every=10"]
    (folder / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(overrides), folder / ".hydra" / "overrides.yaml")
    OmegaConf.save(OmegaConf.create({"hydra": {"job": {"num": num}}}), folder / ".hydra" / "hydra.yaml")
    m = {"status": "ok", "throughput": throughput, "overrides": overrides, "choices": {"compile": "off"},
         "primary_metric": {"name": "accuracy", "value": t["best_value"], "higher_is_better": True},
         "accuracy": t["best_value"], "steps": t["steps"], "warnings": [], "env": {"host": "h", "device": "cpu"},
         "compile_cache": None, "target": t}
    (folder / "metrics.json").write_text(json.dumps(m))


def sweep(tmp_path, jobs, clock="training"):
    for num, (throughput, t) in enumerate(jobs):
        job(tmp_path / str(num), num, throughput, t)
    spec = SweepSpec(task_overrides=[f"optimizer.lr={','.join(LRS[:len(jobs)])}"], objective="time_to_target",
                     target_clock=clock)
    return write_report(tmp_path, spec)


def rows(result):
    return [r["job"] for r in result.rows]


def test_the_soonest_to_reach_the_target_wins_and_unreached_rows_come_last(tmp_path):
    result = sweep(tmp_path, [(100.0, target(60.0, True)), (300.0, target(50.0, False, best=0.93)),
                              (150.0, target(40.0, True, steps=80)), (120.0, target(45.0, True))])
    # one run per job: the soonest leads, but no winner is named (issue 54); the fastest per sample (job 1) never got there
    assert rows(result) == [2, 3, 0, 1] and result.best is None and result.candidate["job"] == 2
    assert result.candidate["speedup"] == 60.0 / 40.0 and result.rows[3]["speedup"] is None
    md = (tmp_path / "report.md").read_text()
    assert "| 2 | 0.01 | 40.0 | 1.50x | 80 | 5,120 | reached | off |" in md
    assert "- leader (no winner named: see below): job 2: reached the target in 40.0 s, 1.50x sooner" in md
    assert "| 1 | 0.003 | > 50.0 (best 93.0 %) | – |" in md and "not reached" in md
    assert "job 1 trains fastest per sample (300.0 samples/s" in md and "the two rankings disagree" in md
    with open(tmp_path / "report.csv") as fh:
        csv_rows = {int(r["job"]): r for r in csv.DictReader(fh)}
    assert float(csv_rows[2]["time_to_target_s"]) == 40.0 and csv_rows[2]["target_reached"] == "True"
    assert csv_rows[1]["time_to_target_s"] == "" and csv_rows[1]["target_reached"] == "False"
    assert not (tmp_path / "best.yaml").exists() and (tmp_path / "report.png").stat().st_size > 0
    by_end_to_end = sweep(tmp_path / "e2e", [(100.0, target(60.0, True)), (150.0, target(40.0, True))], "end_to_end")
    assert by_end_to_end.candidate["time_to_target_s"] == 50.0  # 40 s + the 10 s before the first step


def test_a_baseline_that_missed_gives_no_speed_ups_and_the_fastest_that_reached_wins(tmp_path):
    result = sweep(tmp_path, [(100.0, target(90.0, False)), (100.0, target(70.0, True)), (100.0, target(55.0, True))])
    assert result.candidate["job"] == 2 and all(r["speedup"] is None for r in result.rows)
    md = (tmp_path / "report.md").read_text()
    assert "the baseline (job 0) did not reach the target: no speed-ups" in md and "the winner" not in md
    assert "| 2 | 0.01 | 55.0 | – |" in md
    nobody = sweep(tmp_path / "none", [(100.0, target(90.0, False)), (100.0, target(70.0, False))])
    notes = " ".join(nobody.notes)
    assert nobody.best is None and "no job reached the target" in notes and "the winner is" not in notes


def test_repeats_are_tested_as_paired_seeds_and_what_the_test_cannot_separate_is_a_tie(tmp_path):
    three = sweep(tmp_path / "three", [(100.0, target(60.0, True, repeats=[(58.0, True), (60.0, True), (61.0, True)])),
                                       (100.0, target(48.0, True, repeats=[(47.0, True), (48.0, True), (49.0, True)]))])
    md = (tmp_path / "three" / "report.md").read_text()
    # three seeds: job 1 was sooner every time, yet an exact two-sided sign test cannot reach p < 0.05 with three
    assert three.best is None and three.candidate["job"] == 1 and three.confidence.tie == [1, 0]
    assert "- tie: jobs 1, 0 (3 seeds): not told apart at alpha 0.05 (two-sided sign test of each pair's 3 paired " \
           "seeds, Bonferroni over 1 pair(s): p <= 0.05); no winner is named. Next: race them (hydra/sweeper=race over " \
           "their values), or repeat them over at least 6 seeds (report.repeats)" in md
    assert "| 1 (tie) | 0.003 | 48.0 (47.0-49.0, n=3) |" in md and not (tmp_path / "three" / "best.yaml").exists()
    seeds = [(s, True) for s in (47.0, 48.0, 49.0, 46.0, 50.0, 45.0)]
    six = sweep(tmp_path / "six", [(100.0, target(60.0, True, repeats=[(t + 10, hit) for t, hit in seeds])),
                                   (100.0, target(48.0, True, repeats=seeds))])
    assert six.best["job"] == 1 and six.confidence.kind == "separated"
    assert "- winner: job 1, sooner than every other job beyond the noise at alpha 0.05 (two-sided sign test of each " \
           "pair's 6 paired seeds" in (tmp_path / "six" / "report.md").read_text()
    assert "winner: job 1, sooner than every other job" in (tmp_path / "six" / "best.yaml").read_text()


def test_repeats_are_judged_by_the_races_pairwise_test_so_both_name_the_same_tie(tmp_path):
    # race-0 of benchmarks/results/race/cpu-2026-12-03-024e33d as report.repeats=5 (job 1's last seed 5.0 s, so
    # that it also leads by median): beside two jobs that never reached the target, Conover's pooled test
    # alone separated job 1 from job 0 (p = 0.023); each pair's own seeds cannot, nor five seeds the hopeless pair
    pair = {0: [3.74, 6.32, 2.96, 5.17, 6.61], 1: [3.73, 5.87, 5.31, 4.88, 5.0]}
    jobs = [(100.0, target(statistics.median(pair[n]), True, repeats=[(t, True) for t in pair[n]])) for n in (0, 1)]
    jobs += [(100.0, target(70.0, False, repeats=[(70.0, False)] * 5)) for _ in range(2)]
    result = sweep(tmp_path, jobs)
    assert result.best is None and result.confidence.tie == [1, 0, 2, 3]
    md = (tmp_path / "report.md").read_text()
    assert "> 70.0 (best 90.0 %; 5 of 5 missed)" in md and "repeat them over at least 8 seeds" in md


def test_one_run_per_job_says_the_ranking_is_untested_and_names_the_race(tmp_path):
    # issue 54: a grid with one run per job by time to target names no winner and writes no best.yaml
    result = sweep(tmp_path, [(100.0, target(60.0, True)), (150.0, target(40.0, True))])
    md = (tmp_path / "report.md").read_text()
    assert result.best is None and result.candidate["job"] == 1 and result.confidence.kind == "untested"
    assert "- noise: one run per job: no winner is named and no best.yaml is written" in md
    assert "hydra/sweeper=race" in md and not (tmp_path / "best.yaml").exists()


def test_olympic_aggregation_drops_the_extremes_and_two_misses_are_not_reached(tmp_path):
    from fastpipe.report.time_to_target import aggregate_time

    assert aggregate_time([10.0, 30.0, 11.0, 12.0, 100.0], "olympic") == (11.0 + 12.0 + 30.0) / 3
    assert aggregate_time([10.0, None, 11.0, 12.0, 13.0], "olympic") == 12.0  # a miss is the slowest, dropped
    assert aggregate_time([10.0, None, 11.0, None, 13.0], "olympic") is None
    assert aggregate_time([10.0, None, 11.0, None, 13.0], "median") == 13.0


def test_hparams_carry_the_target(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sweep(tmp_path, [(100.0, target(60.0, True)), (150.0, target(40.0, False))])
    events = EventAccumulator(str(tmp_path / "hparams" / "job-0"))
    events.Reload()
    assert events.Scalars("time_to_target_s")[0].value == 60.0 and events.Scalars("target_reached")[0].value == 1.0
    session = (tmp_path / "hparams" / "job-1")
    assert any(b"accuracy >= 0.95" in f.read_bytes() for f in session.glob("events.out.tfevents.*"))


def test_a_winner_without_a_measured_throughput_counts_as_finished_and_its_rate_reads_n_a(tmp_path):
    """A run that reached the target before its first steady-state window has no throughput (status
    unmeasured): it can win, the header does not count it as not ok, and no "0.0 samples/s" is made up."""
    result = sweep(tmp_path, [(100.0, target(60.0, True)), (None, target(20.0, True, steps=20)),
                              (300.0, target(50.0, False))])
    assert result.candidate["job"] == 1
    md = (tmp_path / "report.md").read_text()
    assert "3 jobs, 2 ok, 1 unmeasured, 0 not ok" in md
    assert "against the leader's n/a: not measured)" in md and "leader's 0.0" not in md
