"""hydra/sweeper=optuna (the optional extra fastpipe[optuna]): jobs return report.objective as a float, and
an Optuna search of optimizer.lr runs two trials on the CPU (slow)."""
from __future__ import annotations

import csv
import subprocess
import sys
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from conftest import REPO, TINY
from fastpipe.sweeps.objective import job_return_value, objective_value, wants_objective

OPTUNA = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
OK = {"status": "ok", "throughput": 123.0, "primary_metric": {"name": "loss", "value": 2.5, "higher_is_better": False}}


def multirun_config(sweeper=OPTUNA, objective="throughput", direction="maximize"):
    from hydra.types import RunMode

    return OmegaConf.create({"hydra": {"sweeper": {"_target_": sweeper, "direction": direction},
                                       "mode": RunMode.MULTIRUN, "job": {"num": 0}},
                             "report": {"objective": objective}})


def test_the_objective_is_the_throughput_or_the_primary_metric():
    assert objective_value(OK, "throughput") == 123.0 and objective_value(OK, "primary_metric") == 2.5
    assert objective_value({"status": "failed", "throughput": 5.0}, "throughput") is None  # a failed trial
    assert wants_objective(OPTUNA) and not wants_objective("hydra._internal.core_plugins.basic_sweeper.BasicSweeper")
    assert not wants_objective("hydra_plugins.fastpipe_sweeps.halving_sweeper.HalvingSweeper")
    basic = multirun_config("hydra._internal.core_plugins.basic_sweeper.BasicSweeper")
    assert job_return_value(OK, basic) is OK  # the basic sweeper and the report read the job folders
    assert job_return_value(OK, multirun_config(objective="primary_metric")) == 2.5


def test_sweep_report_hands_optuna_a_float_and_refuses_minimising_throughput(capsys):
    from hydra.core.utils import JobStatus

    from fastpipe.report.callbacks import SweepReport

    ret = SimpleNamespace(status=JobStatus.COMPLETED, return_value=dict(OK))
    SweepReport().on_job_end(multirun_config(), job_return=ret)
    assert ret.return_value == 123.0
    ret = SimpleNamespace(status=JobStatus.COMPLETED, return_value=dict(OK))
    SweepReport().on_job_end(multirun_config(objective="primary_metric"), job_return=ret)  # a loss, maximised
    assert ret.return_value == 2.5 and "searching for the worst value" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        SweepReport().on_multirun_start(multirun_config(direction="minimize"))
    assert stop.value.code == 2 and "hydra.sweeper.direction=maximize" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        SweepReport().on_multirun_start(multirun_config(sweeper="x.Basic", objective="speed"))


@pytest.mark.slow
def test_two_optuna_trials_search_the_learning_rate(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    args = ["hydra/sweeper=optuna", "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=1", "hydra.sweeper.direction=maximize",
            "hydra.sweeper.sampler.seed=0", "optimizer.lr=interval(0.001,0.01)", "report.objective=primary_metric",
            "launcher.fresh_process=false"] + TINY
    proc = subprocess.run([sys.executable, "-m", "fastpipe", "-m", *args, f"hydra.sweep.dir={tmp_path}"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
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


@pytest.mark.slow
def test_optuna_minimising_throughput_is_refused_before_any_trial(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    proc = subprocess.run([sys.executable, "-m", "fastpipe", "-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=1",
                           "optimizer.lr=interval(0.001,0.01)", f"hydra.sweep.dir={tmp_path}"] + TINY,
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "hydra.sweeper.direction=maximize" in proc.stderr
    assert not list(tmp_path.glob("*/metrics.json"))
