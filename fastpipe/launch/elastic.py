"""launcher=ddp / fsdp from a plain process: one elastic launch (torchrun's engine) of fresh workers per job.

A failed rank becomes a failed job naming the rank that caused it (an exception before a killed
process, both before the lost-peer errors its death causes in the others).
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import traceback
import uuid
from pathlib import Path
from typing import Optional

from fastpipe.record import results
from fastpipe.record.run_record import RunRecord, failed
from fastpipe.config import Config, ProcessGroupLauncherConfig
from fastpipe.errors import EXIT_CODE, EXIT_PREEMPTED, ConfigError, FastpipeError
from fastpipe.launch.handoff import read_settings, settings_file
from fastpipe.machine import environment, visible_gpus
from fastpipe.processes import die_with_parent, exit_reason
from fastpipe.process_group import init_distributed, shutdown_distributed
from fastpipe.runtime import cpu_cores, full_errors
from fastpipe.signals import handlers_kept


def _worker(settings_path: str, run_dir: str, parent: int) -> Optional[dict]:
    """Entry point of each elastic worker: join the group, train, leave. Rank 0 returns the metrics.

    Exceptions propagate: the agent records each in the rank's error file and stops the other ranks;
    one fastpipe recognises is written to the error file here and the rank exits without a traceback.
    """
    from fastpipe.job.training import run_training

    die_with_parent(parent)
    settings = read_settings(settings_path)
    dist = init_distributed(settings)
    try:
        metrics = run_training(settings, Path(run_dir))
    except FastpipeError as exc:  # recognised: its one line reaches the launcher in the error file, no traceback
        from torch.distributed.elastic.multiprocessing.errors import get_error_handler

        if full_errors():
            traceback.print_exc()
        get_error_handler().record_exception(exc)
        sys.exit(getattr(exc, "exit_code", EXIT_CODE))  # EXIT_PREEMPTED after a stop signal
    shutdown_distributed()  # after success only: a failing rank just exits (a dead peer could block it)
    return metrics if dist.is_main else None


class _QuietOnRecognisedExit(logging.Filter):
    """Drops the elastic agent's log of a worker that exited with fastpipe's own code (EXIT_CODE: an
    error fastpipe recognised; EXIT_PREEMPTED: a stop signal): that record is the agent's own stack
    trace, and fastpipe prints the rank's one line from its error file. Other exits keep their log."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return getattr(exc, "exit_code", None) not in (EXIT_CODE, EXIT_PREEMPTED)


AGENT_LOG = "torch.distributed.elastic.multiprocessing.api"


def elastic_config(cfg: ProcessGroupLauncherConfig, nproc: int):
    """torchrun's LaunchConfig for ``cfg``."""
    from torch.distributed.launcher.api import LaunchConfig

    # join_timeout is what torch's c10d rendezvous waits for the other nodes (600 s of its own otherwise)
    rdzv_configs = {"timeout": cfg.timeout_s, "join_timeout": cfg.timeout_s}
    if cfg.rdzv_backend == "static":
        rdzv_configs["rank"] = cfg.node_rank
    # The agent passes these on to every worker; SIGUSR1/SIGUSR2 too (Slurm's warning): the ranks checkpoint.
    extra = ({"signals_to_handle": "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2"}
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


def _stopped_starting(signal_name: str, launcher: str, world: int, run_dir: Path) -> str:
    """A stop signal that ended the ranks before any of them recorded it (they were still starting)."""
    from fastpipe.checkpoint.disk import newest_good

    latest = newest_good(run_dir / "checkpoints")
    again = (f"continue from {latest} with train.resume=auto hydra.run.dir={run_dir}" if latest else
             "nothing to checkpoint; run the same command again")
    return f"stopped by {signal_name} while launcher={launcher} started its {world} ranks, before training began: {again}"


def _failed(run_dir: Path, settings: Config, reason: str, trace: Optional[str], world_size: int,
            status: str = "failed") -> dict:
    """Write the job's failed (or ``status``) metrics.json, keeping what rank 0 recorded of this run; return it."""
    kept = results.own(run_dir, settings.run_id)
    extra = {"traceback": trace} if trace else {}
    if kept is None or kept.get("status") in ("ok", "running"):
        record = failed(reason, settings.choices, settings.overrides, environment(None, world_size), settings.run_id,
                        status=status, **extra)
    else:  # rank 0 recorded its own failure: keep its measurements, name the rank that caused it
        record = RunRecord.from_dict(kept).fail(reason, status=status, **extra)
    results.write_if_possible(run_dir, record)
    return record.to_dict()


def launch_workers(settings: Config, run_dir: Path) -> dict:
    """launcher=ddp / fsdp from a plain process: one elastic launch of fresh workers for this job."""
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import RendezvousError
    from torch.distributed.launcher.api import elastic_launch

    cfg = settings.launcher
    if not cfg.fresh_process:
        raise ConfigError(f"launcher={cfg.name} always trains in fresh worker processes; launcher.fresh_process=false "
                          "works with launcher=single (or start fastpipe under torchrun: each rank trains in place)")
    gpus = visible_gpus(settings.device)
    nproc = cfg.processes(gpus, cpu_cores())  # the cores this process may use (taskset, a cpuset, a sweep slot)
    world = nproc * cfg.nnodes
    where = f"{nproc} GPU(s)" if gpus else "the CPU"
    print(f"fastpipe: launcher={cfg.name}: starting {nproc} worker process(es) on {where} of this machine"
          f"{f' (node {cfg.node_rank} of {cfg.nnodes})' if cfg.nnodes > 1 else ''}, "
          f"{cfg.backend_for('cuda' if gpus else 'cpu')} backend, rendezvous at {cfg.rdzv_endpoint or 'localhost'}",
          file=sys.stderr, flush=True)
    quiet = _QuietOnRecognisedExit()
    logging.getLogger(AGENT_LOG).addFilter(quiet)
    try:
        with settings_file(settings, run_dir) as path, handlers_kept():  # handoff.py: not through the spawn pipe
            elastic_launch(elastic_config(cfg, nproc), _worker)(path, str(run_dir), os.getpid())
    except (ChildFailedError, SignalException) as exc:
        recorded = results.own(run_dir, settings.run_id)
        if recorded is not None and recorded.get("status") == "preempted":  # a stop signal: rank 0 checkpointed
            return recorded
        if isinstance(exc, ChildFailedError):
            return _failed(run_dir, settings, *failure_reason(exc.failures, world, cfg.timeout_s), world)
        if exc.sigval == signal.SIGINT:
            raise KeyboardInterrupt from exc  # Ctrl-C ends a sweep, as it does with launcher=single
        return _failed(run_dir, settings, _stopped_starting(exc.sigval.name, cfg.name, world, run_dir), None, world,
                       status="preempted")
    except RendezvousError as exc:
        return _failed(run_dir, settings, f"launcher=ddp: rendezvous at {cfg.rdzv_endpoint or 'localhost'} failed "
                       f"within launcher.timeout_s={cfg.timeout_s}: {type(exc).__name__}: {exc}", None, world)
    finally:
        logging.getLogger(AGENT_LOG).removeFilter(quiet)
    metrics = results.own(run_dir, settings.run_id)
    if metrics is None:  # rank 0 ran on another node: its run folder holds the job's metrics.json
        return RunRecord.start(settings.choices, settings.overrides, run_id=settings.run_id).set(
            status="ok", warnings=["rank 0 ran on another node; see its run folder"]).to_dict()
    return metrics
