"""The ``launcher`` group: where the training processes come from.

single: one fresh process per job (spawned), so sweep jobs never share CUDA, compile or worker
state, and a crash (segfault, OOM kill) becomes a failed job instead of the end of a sweep.

ddp / fsdp: ``nproc_per_node`` DistributedDataParallel (or FSDP2-sharded) workers per job, started by
torch.distributed's elastic launcher (elastic.py). When fastpipe itself runs under torchrun/srun, the Hydra process is
a rank and joins that group instead.

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
from fastpipe.config import Config
from fastpipe.config.registry import choice
from fastpipe.errors import EXIT_CODE, ConfigError, FastpipeError
from fastpipe.launch.handoff import read_settings, settings_file
from fastpipe.machine import environment
from fastpipe.processes import die_with_parent, exit_reason, started_with_signals_held, take_ctrl_c_once
from fastpipe.process_group import broadcast_from_main, init_distributed, shutdown_distributed
from fastpipe.runtime import dist_from_env, full_errors, started_by_torchrun


def _single_worker(settings_path: str, run_dir: str, parent: int) -> None:
    """Entry point of the training process (spawned for the job, or started ahead: launch/warm.py): exit
    code 0 ok, EXIT_CODE bad input, 1 crash."""
    from fastpipe.measure import setup
    from fastpipe.train.job import run_training

    setup.imports_done()  # a process started ahead said so before its job came: that earlier time counts
    die_with_parent(parent)
    take_ctrl_c_once()
    settings = read_settings(settings_path)
    try:
        if not settings.checked:  # left to this process, which imports torch anyway (checks_in_trainer)
            _check_or_refuse(settings, Path(run_dir))
        run_training(settings, Path(run_dir))
    except FastpipeError as exc:  # the reason is in metrics.json; the parent prints it once
        if full_errors():
            traceback.print_exc()
        sys.exit(getattr(exc, "exit_code", EXIT_CODE))  # EXIT_PREEMPTED after a stop signal
    except KeyboardInterrupt:  # Ctrl-C reached the whole process group: recorded; the parent says it
        sys.exit(130)
    except BaseException:
        traceback.print_exc()
        sys.exit(1)


def checks_in_trainer(settings: Config) -> bool:
    """Whether a single run's fresh training process, not its Hydra process, runs ``Config.check``
    (importing the project's callables): that process imports torch anyway, and the Hydra process then
    never does (its imports ran beside the trainer's own). A sweep checks in
    its own process (it has imported them for every job's check: sweeps/check.py); ddp and fsdp check
    before their ranks start, once rather than in each rank."""
    return (settings.launcher.fresh_process and not choice("launcher", settings.launcher.name).process_group
            and not started_by_torchrun())


def check_before_launch(settings: Config, sweep: bool) -> None:
    """``Config.check`` in the Hydra process, unless a single run's training process will run it."""
    if sweep or not checks_in_trainer(settings):
        settings.check()


def refused(run_dir: Path, exc: FastpipeError, choices: dict, overrides: list, run_id: str = None) -> dict:
    """Settings that cannot work, or a stop signal before training began: the job's failed record, written
    (by the Hydra process, or by a single run's training process after its own check)."""
    record = failed(str(exc), choices, overrides, environment(None, 1), run_id=run_id,
                    **(getattr(exc, "metrics", None) or {}))
    results.write_if_possible(run_dir, record)
    return record.to_dict()


def _check_or_refuse(settings: Config, run_dir: Path) -> None:
    """``Config.check`` in the training process: settings it refuses end the job as the Hydra process
    would have ended it, with their one line as the record's reason (the parent prints it) and before
    any logger or tracker starts."""
    try:
        settings.check()
    except FastpipeError as exc:
        refused(run_dir, exc, settings.choices, settings.overrides, settings.run_id)
        raise


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
    from fastpipe.train.job import run_training

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
    """One fresh training process (the one ``warm.py`` started ahead, when it fits); signals reach it,
    Ctrl-C waits for its record."""
    from fastpipe.launch import warm

    waiting, why = warm.take()
    if why is not None:
        settings = copy.copy(settings)
        settings.launch_notes = [*settings.launch_notes, f"the training process started ahead was not used ({why}): "
                                 "a fresh one was spawned, its imports on the set-up clock"]
    with settings_file(settings, run_dir) as path:  # not through the spawn pipe: launch/handoff.py says why
        if waiting is not None:
            process = waiting.process

            def start() -> int:
                return waiting.hand_over(_single_worker, path, str(run_dir), os.getpid())
        else:
            process = multiprocessing.get_context("spawn").Process(
                target=_single_worker, args=(path, str(run_dir), os.getpid()), name="fastpipe-train")

            def start() -> int:
                process.start()
                return process.pid

        # SIGTERM/SIGUSR1 (Slurm preemption) reach the trainer, which checkpoints; also while it starts
        with started_with_signals_held(start):
            if warm.keep_one_ready:  # a sweep: the next job's process imports while this one trains
                warm.prestart()
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
        from fastpipe.record.loggers import state

        state.settle(Path(run_dir), record)
    return record


def _launch(settings: Config, run_dir: Path) -> dict:
    run_dir = Path(run_dir)
    settings = copy.copy(settings)  # this launch's own id (each repeat of a job is a launch)
    settings.run_id = uuid.uuid4().hex
    group = choice("launcher", settings.launcher.name).process_group
    if group and started_by_torchrun():
        return _join_torchrun(settings, run_dir)
    results.begin(run_dir, settings.choices, settings.overrides, settings.run_id)
    if group:
        from fastpipe.launch.elastic import launch_workers

        return launch_workers(settings, run_dir)
    if started_by_torchrun() and dist_from_env().world_size > 1:
        raise ConfigError(f"fastpipe runs as one of {dist_from_env().world_size} torchrun/srun processes but "
                          f"launcher={settings.launcher.name}; use launcher=ddp (or fsdp) so the ranks train together")
    if not settings.launcher.fresh_process:
        from fastpipe.train.job import run_training

        try:
            return run_training(settings, run_dir)
        except FastpipeError:
            return results.read(run_dir)
    return _spawn_single(settings, run_dir)
