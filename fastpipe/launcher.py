"""The ``launcher`` group: where the training processes come from.

single: one fresh process per job (spawned), so sweep jobs never share CUDA, compile or worker
state, and a crash (segfault, OOM kill) becomes a failed job instead of the end of a sweep.

ddp: ``nproc_per_node`` DistributedDataParallel workers per job, started by torch.distributed's
elastic launcher (torchrun's engine); a failed rank becomes a failed job naming the rank. When
fastpipe itself runs under torchrun/srun, the Hydra process is a rank and joins that group instead.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import traceback
import uuid
from pathlib import Path
from typing import Optional

from fastpipe import results
from fastpipe.config import Config, DdpLauncherConfig
from fastpipe.errors import EXIT_CODE, ConfigError, FastpipeError
from fastpipe.runtime import (
    broadcast_from_main,
    dist_from_env,
    environment,
    init_distributed,
    shutdown_distributed,
    started_by_torchrun,
    visible_gpus,
)
from fastpipe.signals import forwarded_to


def _single_worker(settings: Config, run_dir: str) -> None:
    """Entry point of the spawned process: exit code 0 ok, EXIT_CODE bad input, 1 crash."""
    from fastpipe.job import run_training

    try:
        run_training(settings, Path(run_dir))
    except FastpipeError as exc:  # the reason is in metrics.json; the parent prints it once
        sys.exit(getattr(exc, "exit_code", EXIT_CODE))  # EXIT_PREEMPTED after a stop signal
    except BaseException:
        traceback.print_exc()
        sys.exit(1)


def exit_reason(code: int) -> str:
    """Words for a worker's exit code (negative = killed by that signal)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (the out-of-memory killer sends SIGKILL)" if name == "SIGKILL" else ""
        return f"training process killed by {name}{hint}"
    return f"training process exited with code {code}"


def collect(run_dir: Path, exitcode: int, settings: Config) -> dict:
    """The job's metrics; written here when the worker died before it could write them.

    A worker that finished (metrics.json says ok) and then died on its way out, e.g. from a stop
    signal that arrived as it exited, keeps its results, with a warning naming how it ended.
    """
    metrics = results.read(run_dir)
    if exitcode == 0 and metrics is not None:
        return metrics
    if metrics is not None and metrics.get("status") == "ok":
        metrics.setdefault("warnings", []).append(
            f"{exit_reason(exitcode)} after it had finished and written these results")
        metrics["exitcode"] = exitcode
        results.write(run_dir, metrics)
        return metrics
    if metrics is None:
        metrics = results.failed(exit_reason(exitcode), settings.choices, settings.overrides, environment(None, 1))
        results.write(run_dir, metrics)
    metrics["exitcode"] = exitcode
    return metrics


# ---------------------------------------------------------------- ddp
def _ddp_worker(settings: Config, run_dir: str) -> Optional[dict]:
    """Entry point of each elastic worker: join the group, train, leave. Rank 0 returns the metrics.

    Exceptions propagate: the agent records each in the rank's error file and stops the other ranks.
    """
    from fastpipe.job import run_training

    dist = init_distributed(settings)
    metrics = run_training(settings, Path(run_dir))
    shutdown_distributed()  # after success only: a failing rank just exits (a dead peer could block it)
    return metrics if dist.is_main else None


def elastic_config(cfg: DdpLauncherConfig, nproc: int):
    """torchrun's LaunchConfig for ``cfg`` (a DdpLauncherConfig)."""
    from torch.distributed.launcher.api import LaunchConfig

    rdzv_configs = {"timeout": cfg.timeout_s}
    if cfg.rdzv_backend == "static":
        rdzv_configs["rank"] = cfg.node_rank
    # The agent passes these on to every worker; SIGUSR1 too (Slurm's warning): the ranks checkpoint.
    extra = ({"signals_to_handle": "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"}
             if "signals_to_handle" in LaunchConfig.__dataclass_fields__ else {})  # torch >= 2.7
    return LaunchConfig(**extra,
        min_nodes=cfg.nnodes, max_nodes=cfg.nnodes, nproc_per_node=nproc,
        # One node: a private rendezvous on a free port (torchrun --standalone), so concurrent jobs
        # never meet; several nodes: the shared endpoint and id every node was given.
        run_id=cfg.rdzv_id if cfg.nnodes > 1 else uuid.uuid4().hex,
        rdzv_endpoint=cfg.rdzv_endpoint or "localhost:0", rdzv_backend=cfg.rdzv_backend,
        rdzv_configs=rdzv_configs, max_restarts=cfg.max_restarts, monitor_interval=0.1, start_method="spawn")


# Texts of the errors a rank gets when a peer dies: symptoms, never the root cause.
PEER_LOST = ("DistBackendError", "DistNetworkError", "DistStoreError", "Connection closed by peer",
             "Connection reset by peer", "Broken pipe", "ProcessGroup", "NCCL error", "Gloo", "timed out")


def _failure_text(failure) -> str:
    """One line for a worker failure: its exception, or how the process ended."""
    if not os.path.isfile(failure.error_file):  # no error file: a signal, os._exit or a hard crash
        return exit_reason(failure.exitcode)
    message = failure.message
    if isinstance(message, dict):  # @record's format: {"message": "Type: text", "extraInfo": {...}}
        message = message.get("message", "")
    first = (str(message).strip().splitlines() or [""])[0][:500]
    return first or exit_reason(failure.exitcode)


def _peer_lost(text: str) -> bool:
    return any(m.lower() in text.lower() for m in PEER_LOST)


def root_failure(failures: dict) -> tuple:
    """(rank, failure) most likely to have caused the rest: an exception before a killed process,
    both before a lost-peer error (a rank's death breaks its peers' collectives), then the earliest."""
    def order(item):
        rank, failure = item
        kind = 2 if _peer_lost(_failure_text(failure)) else 0 if os.path.isfile(failure.error_file) else 1
        return kind, failure.timestamp, rank

    return min(failures.items(), key=order)


def failure_reason(failures: dict, world_size: int, timeout_s: Optional[int] = None) -> tuple:
    """``(reason, traceback or None)`` for a ChildFailedError's ``failures`` ({rank: ProcessFailure})."""
    rank, failure = root_failure(failures)
    text = _failure_text(failure)
    if timeout_s and _peer_lost(text):  # only symptoms: a peer hung (or died without a trace)
        text += f" [a peer rank stopped answering: hung or dead; launcher.timeout_s={timeout_s}]"
    others = sorted(r for r in failures if r != rank)
    also = f" (also failed: rank {', '.join(map(str, others))})" if others else ""
    data = failure.error_file_data.get("message") if isinstance(failure.error_file_data, dict) else None
    trace = data.get("extraInfo", {}).get("py_callstack") if isinstance(data, dict) else None
    return f"rank {rank} of {world_size} failed: {text}{also}", trace


def _failed(run_dir: Path, settings: Config, reason: str, trace: Optional[str], world_size: int) -> dict:
    """Write the job's failed metrics.json (keeping what rank 0 recorded) and return it."""
    metrics = results.read(run_dir)
    if metrics is None or metrics.get("status") == "ok":
        metrics = results.new_record(settings.choices, settings.overrides, environment(None, world_size))
    metrics.update(status="failed", reason=reason)
    if trace:
        metrics["traceback"] = trace
    results.write(run_dir, metrics)
    return metrics


def _launch_ddp(settings: Config, run_dir: Path) -> dict:
    """launcher=ddp from a plain process: one elastic launch of fresh workers for this job."""
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import RendezvousError
    from torch.distributed.launcher.api import elastic_launch

    cfg = settings.launcher
    if not cfg.fresh_process:
        raise ConfigError("launcher=ddp always trains in fresh worker processes; launcher.fresh_process=false "
                          "works with launcher=single (or start fastpipe under torchrun: each rank trains in place)")
    nproc = cfg.processes(visible_gpus(settings.device))
    world = nproc * cfg.nnodes
    try:
        elastic_launch(elastic_config(cfg, nproc), _ddp_worker)(settings, str(run_dir))
    except (ChildFailedError, SignalException) as exc:
        recorded = results.read(run_dir)
        if recorded is not None and recorded.get("status") == "preempted":  # a stop signal: rank 0 checkpointed
            return recorded
        if isinstance(exc, ChildFailedError):
            return _failed(run_dir, settings, *failure_reason(exc.failures, world, cfg.timeout_s), world)
        if exc.sigval == signal.SIGINT:
            raise KeyboardInterrupt from exc  # Ctrl-C ends a sweep, as it does with launcher=single
        return _failed(run_dir, settings, f"launcher=ddp stopped by {exc.sigval.name} before the ranks "
                       "checkpointed", None, world)
    except RendezvousError as exc:
        return _failed(run_dir, settings, f"launcher=ddp: rendezvous at {cfg.rdzv_endpoint or 'localhost'} failed "
                       f"within launcher.timeout_s={cfg.timeout_s}: {type(exc).__name__}: {exc}", None, world)
    metrics = results.read(run_dir)
    if metrics is None:  # rank 0 ran on another node: its run folder holds the job's metrics.json
        return {"status": "ok", "reason": None, "note": "rank 0 ran on another node; see its run folder"}
    return metrics


def _join_torchrun(settings: Config, run_dir: Path) -> dict:
    """Started by torchrun/srun: this process is a rank. Train here, recording in rank 0's folder."""
    from fastpipe.job import run_training

    dist = init_distributed(settings)
    run_dir = Path(broadcast_from_main(str(run_dir)))  # each rank's Hydra chose a folder: use rank 0's
    try:
        metrics = run_training(settings, run_dir)
    except FastpipeError as exc:  # bad input: a failed job, exit code 2 from the entry point
        return (results.read(run_dir) if dist.is_main else None) or results.failed(
            str(exc), settings.choices, settings.overrides, environment(None, dist.world_size))
    shutdown_distributed()
    return metrics


def launch(settings: Config, run_dir: Path) -> dict:
    """Run the job per ``settings.launcher`` and return its metrics (status ok or failed)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if settings.launcher.name == "ddp":
        return _join_torchrun(settings, run_dir) if started_by_torchrun() else _launch_ddp(settings, run_dir)
    if started_by_torchrun() and dist_from_env().world_size > 1:
        raise ConfigError(f"fastpipe runs as one of {dist_from_env().world_size} torchrun/srun processes but "
                          f"launcher={settings.launcher.name}; use launcher=ddp so the ranks train together")
    if not settings.launcher.fresh_process:
        from fastpipe.job import run_training

        try:
            return run_training(settings, run_dir)
        except FastpipeError:
            return results.read(run_dir)
    process = multiprocessing.get_context("spawn").Process(
        target=_single_worker, args=(settings, str(run_dir)), name="fastpipe-train")
    process.start()
    with forwarded_to(process.pid):  # SIGTERM/SIGUSR1 (Slurm preemption) reach the trainer, which checkpoints
        process.join()
    return collect(run_dir, process.exitcode, settings)
