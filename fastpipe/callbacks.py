"""Hydra callbacks, registered in conf/config.yaml under ``hydra.callbacks``."""
from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write


def _refuse(exc: Exception) -> None:
    """One line and exit 2: nothing of the running job's folder is touched."""
    from fastpipe.errors import EXIT_CODE

    print(f"fastpipe: error: {exc}", file=sys.stderr, flush=True)
    sys.exit(EXIT_CODE)


def save_hydra_record(config: DictConfig, folder: Path) -> None:
    """``.hydra/config.yaml``, ``hydra.yaml`` and ``overrides.yaml``, as Hydra itself writes them."""
    task_cfg = copy.deepcopy(config)
    with read_write(task_cfg), open_dict(task_cfg):
        del task_cfg["hydra"]
    folder.mkdir(parents=True, exist_ok=True)
    for name, node in (("config.yaml", task_cfg), ("hydra.yaml", OmegaConf.create({"hydra": config.hydra})),
                       ("overrides.yaml", config.hydra.overrides.task)):
        (folder / name).write_text(OmegaConf.to_yaml(node), encoding="utf-8")


class RunGuard(Callback):
    """One writer per run and sweep folder: the job's owner (this process; under torchrun, rank 0)
    locks the folder before anything is written into it, then writes Hydra's ``.hydra/`` record
    itself (fastpipe's config sets ``hydra.output_subdir`` to null so that Hydra does not write it
    first, over a running job's). The lock goes with the job, or with the process if it dies."""

    def __init__(self) -> None:
        self.locks = {}

    def _lock(self, folder: Path, what: str) -> None:
        from fastpipe.runlock import FolderInUse, RunLock
        from fastpipe.runtime import dist_from_env

        if not dist_from_env().is_main:  # under torchrun the ranks share rank 0's folder
            return
        try:
            self.locks[str(folder)] = RunLock(folder, what).acquire()
        except FolderInUse as exc:
            _refuse(exc)

    def _unlock(self, folder: Path) -> None:
        lock = self.locks.pop(str(folder), None)
        if lock is not None:
            lock.release()

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._lock(Path(str(config.hydra.sweep.dir)), "sweep")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._unlock(Path(str(config.hydra.sweep.dir)))

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        from fastpipe.runtime import dist_from_env

        run_dir = Path(config.hydra.runtime.output_dir)
        self._lock(run_dir, "run")
        if config.hydra.output_subdir is None and dist_from_env().is_main:
            save_hydra_record(config, run_dir / ".hydra")

    def on_job_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._unlock(Path(config.hydra.runtime.output_dir))


class SweepReport(Callback):
    """When a ``-m`` sweep ends, write its report into the sweep folder and print the table."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from fastpipe.errors import EXIT_CODE, FastpipeError
        from fastpipe.report.publish import write_report
        from fastpipe.report.sweep import spec_from_config

        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            result = write_report(sweep_dir, spec_from_config(config))
        except FastpipeError as exc:  # e.g. a report.baseline that names no job: the jobs are safe
            print(f"fastpipe: error: sweep report not written: {exc}; the jobs' results are kept: fix it "
                  f"and run python -m fastpipe.report {sweep_dir}", file=sys.stderr, flush=True)
            sys.exit(EXIT_CODE)
        print((sweep_dir / "report.md").read_text(), flush=True)
        if result.best is not None:
            print(f"winner: {sweep_dir / 'best.yaml'}  (commit it: python -m fastpipe.report {sweep_dir} "
                  "--save-best conf/experiment/NAME.yaml)", flush=True)
