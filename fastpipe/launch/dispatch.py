"""The ``launcher`` group: where a job trains.

single: in the process that launches the job, or in one fresh process (spawned) where isolation is
needed. ``launcher.fresh_process=auto`` (the default) trains a single run in the process the user
started, and each sweep job and each repeat in a fresh process, so that no job inherits another's
CUDA, compile or worker state and a crash (segfault, OOM kill) becomes a failed job instead of the
end of a sweep. A job process that a sweep launcher started for this job alone (``hydra/launcher=gpus``,
submitit) is fresh already: its job trains in it.

ddp / fsdp: ``nproc_per_node`` DistributedDataParallel (or FSDP2-sharded) workers per job, started by
torch.distributed's elastic launcher (elastic.py). When fastpipe itself runs under torchrun/srun, its
process is a rank and joins that group instead.

Every launch gives the run an id and versions the folder's record first (results.begin), so a run
that dies is never reported with an earlier run's results. Worker processes die with the process
that started them.
"""
from __future__ import annotations

import contextlib
import copy
import multiprocessing
import os
import signal
import sys
import traceback
import uuid
from pathlib import Path

from fastpipe.record import results
from fastpipe.record.run_record import RunRecord, failed
from fastpipe.record.runlock import hold_once_free
from fastpipe.config import Config
from fastpipe.config.registry import choice
from fastpipe.errors import EXIT_CODE, ConfigError, FastpipeError
from fastpipe.launch.handoff import read_settings, settings_file
from fastpipe.machine import environment
from fastpipe.processes import (EXIT_WITHIN_S, die_with_parent, exit_reason, exit_within, started_with_signals_held,
                                take_ctrl_c_once)
from fastpipe.process_group import broadcast_from_main, init_distributed, shutdown_distributed
from fastpipe.signals import stopped_before_training
from fastpipe.runtime import dist_from_env, full_errors, process_environment, started_by_torchrun


def _single_worker(settings_path: str, run_dir: str, parent: int) -> None:
    """Entry point of a fresh training process: exit code 0 ok, EXIT_CODE bad input, 75 stopped by a
    signal, 130 Ctrl-C, 1 crash; the process ends within EXIT_WITHIN_S of its record, whatever threads remain."""
    die_with_parent(parent, signal.SIGTERM)  # its sweep ended without it: checkpoint and stop, as when preempted
    take_ctrl_c_once()
    hold_once_free(Path(run_dir), "a sweep job's training process whose sweep ended")  # if its parent dies first
    code, settings = 1, read_settings(settings_path)
    try:
        process_environment(settings)  # before torch's first CUDA call, as in the launching process
        from fastpipe.measure import setup
        from fastpipe.job.training import run_training

        setup.imports_done()
        run_training(settings, Path(run_dir))
        code = 0
    except FastpipeError as exc:  # the reason is in metrics.json; the parent prints it once
        if full_errors():
            traceback.print_exc()
        recorded(Path(run_dir), settings, exc)
        code = getattr(exc, "exit_code", EXIT_CODE)  # EXIT_PREEMPTED after a stop signal
    except KeyboardInterrupt:  # Ctrl-C reached the whole process group: recorded; the parent says it
        code = 130
    except BaseException:
        traceback.print_exc()
    exit_within(EXIT_WITHIN_S, code)
    sys.exit(code)


JOB_PROCESS_LAUNCHERS = ("hydra_plugins.fastpipe_sweeps.gpus_launcher.GpusLauncher",
                         "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
                         "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher")


def import_trainer() -> None:
    """Import what training needs (torch, the stages) in this process, and mark there the end of the
    ``imports`` set-up part (measure/setup.py): what comes after it, the config's check and the run's
    provenance, is ``launch``."""
    from fastpipe.measure import setup
    from fastpipe.job import training  # noqa: F401

    setup.imports_done()


def own_job_process(sweep_job: bool, hydra_launcher: str) -> bool:
    """Whether this sweep job runs in a process the sweep's Hydra launcher (``hydra_launcher``, its
    ``_target_``) started for it alone: JOB_PROCESS_LAUNCHERS."""
    return sweep_job and hydra_launcher in JOB_PROCESS_LAUNCHERS


def resolve_fresh_process(settings: Config, sweep_job: bool, own_process: bool = False) -> None:
    """``launcher.fresh_process=auto`` made true or false for this job: a fresh training process for a
    sweep's job (unless ``own_process``: its Hydra launcher started one for it alone, ``own_job_process``)
    and for each repeat (``report.repeats > 1``); else this process."""
    cfg = settings.launcher
    if cfg.fresh_process == "auto":
        cfg.fresh_process = settings.report.repeats > 1 or (sweep_job and not own_process)


def refused(run_dir: Path, exc: FastpipeError, choices: dict, overrides: list, run_id: str = None) -> dict:
    """Settings that cannot work, or a stop signal before training began: the job's failed record, written
    (by the process that launches it)."""
    record = failed(str(exc), choices, overrides, environment(None, 1), run_id=run_id,
                    **(getattr(exc, "metrics", None) or {}))
    results.write_if_possible(run_dir, record)
    return record.to_dict()


def recorded(run_dir: Path, settings: Config, exc: FastpipeError) -> dict:
    """The record of a run that ended with ``exc``: the run's own, or, where it ended before it could
    record why (a stop signal as it began), one written here with that reason (the stop signal's first)."""
    record = results.own(run_dir, settings.run_id)
    if record is None or record.get("status") == "running":
        return refused(run_dir, stopped_before_training() or exc, settings.choices, settings.overrides,
                       settings.run_id)
    return record


def collect(run_dir: Path, exitcode: int, settings: Config) -> dict:
    """The job's record; written here when the worker died before it could write its own.

    A worker that finished (its record says ok) and then died on its way out, e.g. from a stop
    signal that arrived as it exited, keeps its results, with a warning naming how it ended.
    """
    metrics = results.own(run_dir, settings.run_id)
    if exitcode == 0 and metrics is not None and metrics.get("status") != "running":
        return metrics
    if metrics is None or metrics.get("status") == "running":  # it died before writing its outcome
        record = failed(exit_reason(exitcode), settings.choices, settings.overrides, environment(None, 1),
                        run_id=settings.run_id)
        results.write_if_possible(run_dir, record)
    else:
        record = RunRecord.from_dict(metrics)
        if record.status == "ok":
            record.warnings.append(f"{exit_reason(exitcode)} after it had finished and written these results")
            record.exitcode = exitcode
            results.write_if_possible(run_dir, record)
    record.exitcode = exitcode
    return record.to_dict()


def _join_torchrun(settings: Config, run_dir: Path) -> dict:
    """Started by torchrun/srun: this process is a rank. Train here, recording in rank 0's folder."""
    from fastpipe.job.training import run_training

    dist = init_distributed(settings)
    run_dir = Path(broadcast_from_main(str(run_dir)))  # each rank's Hydra chose a folder: use rank 0's
    settings.run_id = broadcast_from_main(settings.run_id)
    if dist.is_main:
        results.begin(run_dir, settings.choices, settings.overrides, settings.run_id)
    try:
        metrics = run_training(settings, run_dir)
    except FastpipeError as exc:  # bad input: a failed job, exit code 2 from the entry point
        return (results.own(run_dir, settings.run_id) if dist.is_main else None) or failed(
            str(exc), settings.choices, settings.overrides, environment(None, dist.world_size),
            run_id=settings.run_id).to_dict()
    shutdown_distributed()
    return metrics


def _spawn_single(settings: Config, run_dir: Path) -> dict:
    """One fresh training process for the job; stop signals reach it, Ctrl-C waits for its record."""
    with settings_file(settings, run_dir) as path:  # not through the spawn pipe: launch/handoff.py says why
        process = multiprocessing.get_context("spawn").Process(
            target=_single_worker, args=(path, str(run_dir), os.getpid()), name="fastpipe-train")

        def start() -> int:
            process.start()
            return process.pid

        # SIGTERM/SIGUSR1/SIGUSR2 (Slurm preemption) reach the trainer, which checkpoints; also while it starts
        with started_with_signals_held(start):
            try:
                process.join()
            except KeyboardInterrupt:  # Ctrl-C: the trainer records why. A SIGINT to this process alone is
                # passed on; from a terminal the trainer got it too (one process group) and takes both as one
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGINT)
                process.join(timeout=30)
                raise
    return collect(run_dir, process.exitcode, settings)


def launch(settings: Config, run_dir: Path) -> dict:
    """Run the job per ``settings.launcher`` and return its record (status ok, failed or preempted); a
    tracker run its trainer began but could not end (the trainer was killed) ends with that record."""
    record = _launch(settings, run_dir)
    if settings.logger and dist_from_env().is_main:
        from fastpipe.record.loggers import trackers_file

        trackers_file.settle(Path(run_dir), record)
    return record


def _settle_earlier(run_dir: Path) -> None:
    """The tracker runs an earlier run in ``run_dir`` began and never ended (its process died outright) end
    before this run's replace them in trackers.json; this job holds the folder, so a record still ``running``
    is a dead run's."""
    from fastpipe.record.loggers import trackers_file

    earlier = results.read(run_dir)
    if earlier is not None and earlier.get("status") == "running":
        earlier = results.died(earlier, run_dir)
    trackers_file.settle(run_dir, earlier)


def _launch(settings: Config, run_dir: Path) -> dict:
    run_dir = Path(run_dir)
    settings = copy.copy(settings)  # this launch's own id (each repeat of a job is a launch)
    settings.run_id = uuid.uuid4().hex
    group = choice("launcher", settings.launcher.name).process_group
    if group and started_by_torchrun():
        return _join_torchrun(settings, run_dir)
    if not settings.train.resume:
        _settle_earlier(run_dir)
    results.begin(run_dir, settings.choices, settings.overrides, settings.run_id)
    if group:
        from fastpipe.launch.elastic import launch_workers

        return launch_workers(settings, run_dir)
    if started_by_torchrun() and dist_from_env().world_size > 1:
        raise ConfigError(f"fastpipe runs as one of {dist_from_env().world_size} torchrun/srun processes but "
                          f"launcher={settings.launcher.name}; use launcher=ddp (or fsdp) so the ranks train together")
    if settings.launcher.fresh_process is True:
        return _spawn_single(settings, run_dir)
    from fastpipe.job.training import run_training

    try:
        return run_training(settings, run_dir)
    except FastpipeError as exc:  # the entry point prints its line and exits 2 (or 75)
        return recorded(run_dir, settings, exc)
