"""A job's place in its sweep, the stage its trackers tag it with: a grid's job, halving's probe or full run,
an Optuna trial."""
from __future__ import annotations

import pytest
from hydra.types import RunMode
from omegaconf import OmegaConf

from fastpipe.sweeps.job_place import job_place

HALVING = "hydra_plugins.fastpipe_sweeps.halving_sweeper.HalvingSweeper"


def hydra(mode, output_dir, sweeper="hydra._internal.core_plugins.basic_sweeper.BasicSweeper", num=3):
    return OmegaConf.create({"mode": mode, "runtime": {"output_dir": output_dir}, "sweep": {"dir": "/s"},
                             "sweeper": {"_target_": sweeper}, "job": {"num": num}})


@pytest.mark.parametrize("output_dir,sweeper,place", [
    ("/s/3", None, {"stage": "job"}),
    ("/s/probe-2/3", HALVING, {"stage": "probe", "round": 2}),
    ("/s/3", HALVING, {"stage": "full"}),
    ("/s/3", "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper", {"stage": "trial"}),
])
def test_a_sweeps_job_is_placed_by_its_sweeper_and_folder(output_dir, sweeper, place):
    args = (RunMode.MULTIRUN, output_dir) + ((sweeper,) if sweeper else ())
    assert job_place(hydra(*args)) == {"sweep_dir": "/s", "job": 3, **place}
    assert job_place(hydra(RunMode.RUN, "/out/run")) == {"stage": "run"}
