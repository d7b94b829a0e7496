"""hydra/sweeper=optuna (the optional extra fastpipe[optuna]): jobs return report.objective as a float, and
an Optuna search of optimizer.lr runs two trials on the CPU (slow)."""
from __future__ import annotations

import csv

import pytest
from omegaconf import OmegaConf

from conftest import TINY, run_sweep

OPTUNA = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"


def test_two_optuna_trials_search_the_learning_rate(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    args = ["hydra/sweeper=optuna", "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=1", "hydra.sweeper.direction=maximize",
            "hydra.sweeper.sampler.seed=0", "optimizer.lr=interval(0.001,0.01)", "report.objective=primary_metric",
            "launcher.fresh_process=false"] + TINY  # the trials train in this process: the search is the subject
    proc = run_sweep(tmp_path, args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "report.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows)
    lrs = [float(r["optimizer.lr"]) for r in rows]
    assert lrs[0] != lrs[1] and all(0.001 <= lr <= 0.01 for lr in lrs)
    best = OmegaConf.load(tmp_path / "optimization_results.yaml")  # what Optuna saw: the jobs' accuracies
    assert best.best_value == pytest.approx(max(float(r["metric_value"]) for r in rows))
    assert float(next(r for r in rows if r["best"] == "True")["metric_value"]) == pytest.approx(best.best_value)
    assert (tmp_path / "multirun.yaml").is_file()  # saved for python -m fastpipe.report


def test_optuna_minimising_throughput_is_refused_before_any_trial(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    proc = run_sweep(tmp_path, ["hydra/sweeper=optuna", "hydra.sweeper.n_trials=1", "optimizer.lr=interval(0.001,0.01)",
                                *TINY])
    assert proc.returncode == 2 and "hydra.sweeper.direction=maximize" in proc.stderr
    assert not list(tmp_path.glob("*/metrics.json"))
