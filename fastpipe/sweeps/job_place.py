"""A job's place in its sweep, from Hydra's runtime config: the stage its trackers tag it with."""
from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from fastpipe.sweeps.halving.plan import PROBE_PREFIX


def job_place(hydra_cfg) -> dict:
    """``{"stage": "run"}`` for a single run; for a sweep's job its ``sweep_dir``, ``job`` number and
    ``stage``: ``probe`` (with its ``round``) or ``full`` under hydra/sweeper=halving, ``trial`` under
    an Optuna sweeper, else ``job``."""
    from hydra.types import RunMode

    if hydra_cfg.mode != RunMode.MULTIRUN:
        return {"stage": "run"}
    run_dir = Path(str(hydra_cfg.runtime.output_dir))
    sweeper = str(OmegaConf.select(hydra_cfg, "sweeper._target_", default="") or "")
    place = {"sweep_dir": str(Path(str(hydra_cfg.sweep.dir)).absolute()),
             "job": OmegaConf.select(hydra_cfg, "job.num", default=None)}
    probe = run_dir.parent.name
    if probe.startswith(PROBE_PREFIX) and probe[len(PROBE_PREFIX):].isdigit():
        return {**place, "stage": "probe", "round": int(probe[len(PROBE_PREFIX):])}
    if sweeper.endswith("HalvingSweeper"):
        return {**place, "stage": "full"}
    return {**place, "stage": "trial" if "optuna" in sweeper.lower() else "job"}
