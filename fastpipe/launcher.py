"""The ``launcher`` group: where the training processes come from.

single: one fresh process per job (spawned), so sweep jobs never share CUDA, compile or worker
state, and a crash (segfault, OOM kill) becomes a failed job instead of the end of a sweep.
"""
from __future__ import annotations

import multiprocessing
import signal
import sys
import traceback
from pathlib import Path

from fastpipe.errors import EXIT_CODE, FastpipeError
from fastpipe.report.run import empty_metrics, read_metrics, write_json_atomic
from fastpipe.runtime import environment
from fastpipe.signals import forwarded_to


def _single_worker(settings, run_dir: str) -> None:
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


def collect(run_dir: Path, exitcode: int, settings) -> dict:
    """The job's metrics; written here when the worker died before it could write them."""
    metrics = read_metrics(run_dir)
    if exitcode == 0 and metrics is not None:
        return metrics
    if metrics is None or metrics.get("status") == "ok":
        metrics = empty_metrics(settings.choices, settings.overrides, environment(None, 1))
        metrics["reason"] = exit_reason(exitcode)
        write_json_atomic(Path(run_dir) / "metrics.json", metrics)
    metrics["exitcode"] = exitcode
    return metrics


def launch(settings, run_dir: Path) -> dict:
    """Run the job per ``settings.launcher`` and return its metrics (status ok or failed)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not settings.launcher.fresh_process:
        from fastpipe.job import run_training

        try:
            return run_training(settings, run_dir)
        except FastpipeError:
            return read_metrics(run_dir)
    process = multiprocessing.get_context("spawn").Process(
        target=_single_worker, args=(settings, str(run_dir)), name="fastpipe-train")
    process.start()
    with forwarded_to(process.pid):  # SIGTERM/SIGUSR1 (Slurm preemption) reach the trainer, which checkpoints
        process.join()
    return collect(run_dir, process.exitcode, settings)
