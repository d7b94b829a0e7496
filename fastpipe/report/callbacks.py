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


def _writable_or_refuse(folder: Path, key: str) -> None:
    """One line and exit 2 for a folder that cannot be written (read-only, a full disk), before Hydra's
    job log or anything else is written into it (record/writable.py)."""
    from fastpipe.errors import Unwritable
    from fastpipe.record.writable import check_writable

    try:
        check_writable(folder, key)
    except Unwritable as exc:
        _refuse(exc)


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
    first, over a running job's). The lock goes with the job, or with the process if it dies. Before
    that, as the run or sweep starts, a folder that cannot be written is one line (record/writable.py)."""

    def __init__(self) -> None:
        self.locks = {}

    def _lock(self, folder: Path, what: str) -> None:
        from fastpipe.record.runlock import FolderInUse, RunLock
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

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from fastpipe.errors import ConfigError
        from fastpipe.record import finished_run, results

        run_dir = Path(str(config.hydra.run.dir))
        _writable_or_refuse(run_dir, "hydra.run.dir")
        resume = OmegaConf.select(config, "train.resume")
        try:  # before .hydra/ or anything else of the finished run is touched
            results.refuse_finished(run_dir, resume)
        except ConfigError as exc:
            _refuse(exc)
        record = results.read(run_dir)
        if resume and isinstance(record, dict) and record.get("status") == "ok":
            finished_run.keep(run_dir)  # put back by the app unless this launch trains (record/finished_run.py)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from fastpipe.errors import ConfigError
        from fastpipe.record.results import refuse_finished_sweep
        from fastpipe.sweeps.check import check_sweep

        try:
            check_sweep(config)  # a value no job could train with refuses the sweep before any job runs
        except ConfigError as exc:
            _refuse(exc)
        _writable_or_refuse(Path(str(config.hydra.sweep.dir)), "hydra.sweep.dir")
        self._lock(Path(str(config.hydra.sweep.dir)), "sweep")
        if not OmegaConf.select(config, "sweep.resume", default=False):  # its lock held: nothing else writes it now
            try:
                refuse_finished_sweep(Path(str(config.hydra.sweep.dir)))
            except ConfigError as exc:
                self._unlock(Path(str(config.hydra.sweep.dir)))
                _refuse(exc)

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
    """When a ``-m`` sweep ends, write its report into the sweep folder and print the table.

    For a sweeper that optimises the value its jobs return (Optuna, Nevergrad, ...), each job's return
    becomes its ``report.objective`` (a float) instead of the metrics dict; the sweep's start checks
    that the sweeper's direction suits a throughput objective."""

    def __init__(self) -> None:
        self._warned_direction = False
        self.trackers = None  # the sweep's own tracker runs (MLflow's parent): record/loggers/sweep.py

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from fastpipe.config.report import OBJECTIVE_CHOICES
        from fastpipe.errors import ConfigError, FastpipeError
        from fastpipe.record.loggers.sweep import start_sweep
        from fastpipe.record.provenance import code_provenance
        from fastpipe.sweeps.objective import OBJECTIVES, direction_name, wants_objective

        objective = str(OmegaConf.select(config, "report.objective", default="throughput"))
        if objective not in OBJECTIVES:  # before any job starts, for every sweeper
            _refuse(ConfigError(OBJECTIVE_CHOICES.format(value=repr(objective))))
        if wants_objective(OmegaConf.select(config, "hydra.sweeper._target_", default=None)):
            direction = direction_name(OmegaConf.select(config, "hydra.sweeper.direction", default="maximize"))
            if objective == "throughput" and direction == "minimize":
                _refuse(ConfigError("report.objective=throughput is higher-is-better but hydra.sweeper.direction="
                                    "minimize: add hydra.sweeper.direction=maximize"))
            if objective == "time_to_target" and direction == "maximize":
                _refuse(ConfigError("report.objective=time_to_target is lower-is-better (seconds to the target) but "
                                    "hydra.sweeper.direction=maximize: add hydra.sweeper.direction=minimize"))
        try:  # last: nothing is made in a tracker for a sweep refused above
            self.trackers = start_sweep(config, code_provenance(Path.cwd(), [config.hydra.sweep.dir])[0])
        except FastpipeError as exc:
            _refuse(exc)
        except Exception as exc:  # the tracker answered, but refused (Hydra would only warn and go on)
            _refuse(FastpipeError(f"the sweep's tracker runs could not be made ({type(exc).__name__}: "
                                  f"{str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}); check the "
                                  "tracker (logger.*), or choose another logger"))

    def on_job_end(self, config: DictConfig, job_return: Any = None, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus
        from hydra.types import RunMode

        from fastpipe.sweeps.objective import direction_name, higher_is_better, job_return_value

        if job_return is None or job_return.status != JobStatus.COMPLETED or config.hydra.mode != RunMode.MULTIRUN:
            return
        metrics = job_return.return_value
        if not isinstance(metrics, dict):
            return
        value = job_return_value(metrics, config)
        if value is metrics:
            return
        job_return.return_value = value
        objective = str(OmegaConf.select(config, "report.objective", default="throughput"))
        direction = direction_name(OmegaConf.select(config, "hydra.sweeper.direction", default="maximize"))
        higher = higher_is_better(metrics, objective)
        if value is None:
            print(f"fastpipe: warning: job {config.hydra.job.num} has no {objective} "
                  f"(status {metrics.get('status')}): the sweeper records a failed trial", file=sys.stderr, flush=True)
        elif (higher is not None and direction in ("minimize", "maximize") and higher != (direction == "maximize")
              and not self._warned_direction):
            self._warned_direction = True
            name = (metrics.get("primary_metric") or {}).get("name", objective)
            print(f"fastpipe: warning: report.objective={objective} ({name}) is "
                  f"{'higher' if higher else 'lower'}-is-better but hydra.sweeper.direction={direction}: the "
                  f"sweeper is searching for the worst value; set hydra.sweeper.direction="
                  f"{'maximize' if higher else 'minimize'}", file=sys.stderr, flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from fastpipe.errors import EXIT_CODE, FastpipeError
        from fastpipe.report.publish import write_report
        from fastpipe.report.sweep_folder import spec_from_config

        sweep_dir = Path(config.hydra.sweep.dir)
        if sweep_dir.is_dir() and not (sweep_dir / "multirun.yaml").is_file():
            OmegaConf.save(config, sweep_dir / "multirun.yaml")  # a sweeper that does not save it (Optuna)
        try:
            result = write_report(sweep_dir, spec_from_config(config))
        except FastpipeError as exc:  # e.g. a report.baseline that names no job: the jobs are safe
            print(f"fastpipe: error: sweep report not written: {exc}; the jobs' results are kept: fix it "
                  f"and run python -m fastpipe.report {sweep_dir}", file=sys.stderr, flush=True)
            if self.trackers is not None:
                self.trackers.end(None)
            sys.exit(EXIT_CODE)
        if self.trackers is not None:  # the report and best.yaml to the sweep's tracker runs, the winner tagged
            self.trackers.end(result)
        print((sweep_dir / "report.md").read_text(), flush=True)
        if result.best is not None:
            print(f"winner: {sweep_dir / 'best.yaml'}  (commit it: python -m fastpipe.report {sweep_dir} "
                  "--save-best conf/experiment/NAME.yaml)", flush=True)
