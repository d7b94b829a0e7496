"""Sweepers under report.objective=time_to_target: repeats' seeds, Optuna's value, halving's plan (issue 22)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from fastpipe.launch.repeats import combine_targets, launch_repeats
from fastpipe.sweeps.halving.to_target import budgets, judge, rounds_needed
from fastpipe.sweeps.objective import MISSED_S, job_return_value, objective_value

OPTUNA = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"


def ran(seconds, reached, value=0.9, stopped_by=None):
    return {"status": "ok", "stopped_by": stopped_by or ("target" if reached else "time_budget"),
            "primary_metric": {"name": "accuracy", "value": value, "higher_is_better": True},
            "target": {"reached": reached, "seconds": seconds, "seconds_end_to_end": seconds + 5.0, "steps": 10,
                       "best_value": value}}


def test_repeats_under_time_to_target_use_the_next_seeds_and_report_the_median(tmp_path):
    seen = []

    def launch(settings, run_dir):
        seen.append(settings.seed)
        return dict(ran({3: 30.0, 4: 20.0, 5: 25.0}[settings.seed], True), throughput=100.0 + settings.seed)

    settings = SimpleNamespace(seed=3, started_at=0.0, report=SimpleNamespace(repeats=3, objective="time_to_target"))
    metrics = launch_repeats(launch, settings, tmp_path)
    assert seen == [3, 4, 5] and metrics["target"]["seconds"] == 25.0 and metrics["target"]["reached"]
    assert metrics["target"]["repeats"]["seconds"] == [30.0, 20.0, 25.0]
    settings.report.objective, seen[:] = "throughput", []
    (tmp_path / "throughput").mkdir()
    launch_repeats(launch, settings, tmp_path / "throughput")
    assert seen == [3, 3, 3]  # throughput repeats measure the same run again


def test_the_held_out_metrics_of_repeats_are_their_medians_not_one_repeats(tmp_path):
    # Throughput picks repeat 0 as the representative; its held-out numbers must not stand for the job.
    rows = [(0.2278, 110.0, 16, True), (0.2460, 100.0, 60, False), (0.2607, 90.0, 60, False)]
    outcomes = iter([dict(ran(8.0 if hit else 20.0, hit, value=v), throughput=t, steps=steps,
                          primary_metric={"name": "mae", "value": v, "higher_is_better": False},
                          val_metrics={"mae": v, "loss": 2 * v}, best={"step": steps, "value": v})
                     for v, t, steps, hit in rows])
    settings = SimpleNamespace(seed=0, started_at=0.0, report=SimpleNamespace(repeats=3, objective="time_to_target"))
    m = launch_repeats(lambda settings, folder: next(outcomes), settings, tmp_path)
    assert m["throughput"] == 100.0 and not m["target"]["reached"]  # two of three missed
    assert m["primary_metric"] == {"name": "mae", "value": 0.2460, "higher_is_better": False}
    assert m["val_metrics"] == {"mae": 0.2460, "loss": 0.4920} and m["best"] == {"step": 60, "value": 0.2460}


def test_a_repeat_that_missed_counts_as_the_slowest():
    two_of_three = combine_targets([ran(30.0, True)["target"], ran(80.0, False)["target"], ran(20.0, True)["target"]])
    assert two_of_three["reached"] and two_of_three["seconds"] == 30.0
    one_of_two = combine_targets([ran(30.0, True)["target"], ran(80.0, False)["target"]])
    assert not one_of_two["reached"] and one_of_two["seconds"] == 55.0  # the median run's clock
    # a miss's best value is the median over the runs, as its held-out column is (not the slowest run's)
    misses = combine_targets([ran(70.0, False, 0.681)["target"], ran(90.0, False, 0.76)["target"],
                              ran(80.0, False, 0.75)["target"]])
    assert not misses["reached"] and misses["best_value"] == 0.75 and misses["seconds"] == 80.0


def optuna_config(direction="minimize"):
    return OmegaConf.create({"hydra": {"sweeper": {"_target_": OPTUNA, "direction": direction}},
                             "report": {"objective": "time_to_target", "target_clock": "training"}})


def test_optuna_minimises_the_time_and_every_miss_scores_after_every_hit(capsys):
    from fastpipe.report.callbacks import SweepReport

    def missed(seconds, best):  # accuracy target 0.8
        m = ran(seconds, False, value=best)
        m["target"].update(value=0.8, higher_is_better=True)
        return m

    assert job_return_value(ran(42.0, True), optuna_config()) == 42.0
    assert objective_value(ran(42.0, True), "time_to_target", clock="end_to_end") == 47.0
    quick_miss, near_miss, slow_hit = missed(1.0, 0.4), missed(60.0, 0.76), ran(5000.0, True)
    values = [job_return_value(m, optuna_config()) for m in (slow_hit, near_miss, quick_miss)]
    assert values == sorted(values) and values[1] == pytest.approx(MISSED_S + 0.05)  # 0.04 short of 0.8
    lower = ran(3.0, False, value=2.5)
    lower["target"].update(value=2.0, higher_is_better=False)  # a loss: 0.5 above the target 2.0
    assert objective_value(lower, "time_to_target") == pytest.approx(MISSED_S + 0.25)
    assert objective_value({"status": "failed"}, "time_to_target") is None
    with pytest.raises(SystemExit) as stop:
        SweepReport().on_multirun_start(optuna_config("maximize"))
    assert stop.value.code == 2 and "add hydra.sweeper.direction=minimize" in capsys.readouterr().err


def test_halving_budgets_rise_to_the_baselines_time():
    assert rounds_needed(7, 0.5, 2) == 2  # 7 -> 4 -> 2
    assert budgets(7, 0.5, 2, reference_s=80.0) == [40.0, 80.0]  # the last round: the time to beat
    assert budgets(7, 0.5, 2, budget_s=10.0) == [10.0, 20.0]
    assert rounds_needed(2, 0.5, 2) == 0


def test_a_round_keeps_the_best_metric_and_ends_once_someone_reached_the_target():
    results = {1: ran(20.0, False, 0.6), 2: ran(20.0, False, 0.8), 3: ran(20.0, False, 0.7),
               4: {"status": "failed"}, 5: ran(12.0, False, 0.5, stopped_by=None) | {"stopped_by": None}}
    outcome = judge(results, keep=0.5, finalists=1, higher_is_better=True)
    assert (outcome.kept, outcome.dropped, outcome.failed, outcome.finished, outcome.done) == ([2, 3], [1], [4], [5], False)
    outcome = judge({1: ran(20.0, False, 0.6), 2: ran(15.0, True, 0.95)}, keep=0.5, finalists=1, higher_is_better=True)
    assert (outcome.kept, outcome.dropped, outcome.reached, outcome.done) == ([], [1], [2], True)
