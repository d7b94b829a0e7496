"""What a job returns to a sweeper that searches (hydra/sweeper=optuna): report.objective as a float."""
from __future__ import annotations

from types import SimpleNamespace

from omegaconf import OmegaConf
import pytest

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
