"""A training job that did not finish: the error a user can act on, its one-line reason, and its record.

Known failures become one line with the fix (out of memory, a dead DataLoader worker, a full or
read-only disk); an exception a DataLoader worker raised keeps its own message (torch's first line
says only "Caught ValueError in DataLoader worker process 0"); anything else is ``Type: first
line`` with its traceback kept in metrics.json. The record names the newest good checkpoint.
"""
from __future__ import annotations

import re
import sys
import traceback
from pathlib import Path

import torch

from fastpipe.config import Config
from fastpipe.config.registry import choice, lower_precision
from fastpipe.errors import (EnvironmentProblem, FastpipeError, OutOfMemory, TrainingError, Unwritable, cannot_write,
                             memory_fixes, unwritable)
from fastpipe.record.run_record import RunRecord

WORKER = re.compile(r"^Caught (\w+) in (DataLoader worker process \d+)\.")


def _worker_death(text: str) -> str:
    """What a DataLoader worker's death says of its cause, from torch's words for it, and what to do."""
    if "Terminated" in text:  # SIGTERM: a process sent it; the out-of-memory killer sends SIGKILL
        return ("it was ended by SIGTERM, which another process sent (a kill, a scheduler, a shutdown of the "
                "machine or of this process's group), not the out-of-memory killer (it sends SIGKILL); run again, "
                "and look for what signalled it")
    if "Killed" in text:
        return ("SIGKILL: the out-of-memory killer, most often (the kernel log says: dmesg); lower "
                "data.num_workers or train.batch_size, or read a pack with data=mmap")
    if "Bus error" in text:
        return "a bus error: most often /dev/shm too small for the batches (docker run --shm-size), or lower data.num_workers"
    return ("the out-of-memory killer is the usual cause: lower data.num_workers or train.batch_size, or read a pack "
            "with data=mmap")


def fixable_failure(settings: Config, exc: BaseException, run_dir: Path) -> BaseException:
    """The error a user can act on for a known failure, else ``exc``."""
    if isinstance(exc, torch.OutOfMemoryError):
        return out_of_memory(settings, exc)
    full = unwritable(exc)
    if full is not None and not isinstance(exc, FastpipeError):
        return cannot_write(full, run_dir)
    text = (str(exc).strip().splitlines() or [""])[0]
    if isinstance(exc, RuntimeError) and "DataLoader worker" in text and ("killed" in text or "exited" in text):
        return EnvironmentProblem(f"a DataLoader worker process died ({text}); {_worker_death(text)}")
    if isinstance(exc, RuntimeError) and "Expected to have finished reduction" in text:  # DDP, at the second step
        model = settings.choices.get("model", settings.model.short_name)
        return TrainingError(f"launcher={settings.launcher.name}: model={model}'s forward left some parameters without "
                             "a gradient (an unused head or layer), which DDP does not look for by default; set "
                             "launcher.find_unused_parameters=true (or launcher.static_graph=true when the same "
                             "ones are always unused), or use them in the loss")
    return exc


def record_failure(failure: BaseException, record: RunRecord, ckpt) -> None:
    """Fill ``record`` for a run that did not finish: one line of reason, the newest good checkpoint."""
    try:
        ckpt.settle(barrier=False)  # a write in flight completes first: it may be the newest good one
    except Exception as exc:  # its own failure (a full disk) is worth a line, not a second crash
        record.warnings.append(f"the checkpoint being written failed: {type(exc).__name__}: {exc}")
    latest = None if ckpt.latest is None else str(ckpt.latest)
    if isinstance(failure, KeyboardInterrupt):
        step = ckpt.position.step if ckpt.position is not None else 0
        record.fail(f"interrupted (Ctrl-C) at step {step}; " + (
                    f"the newest good checkpoint is {latest}" if latest else "no checkpoint was written"),
                    status="interrupted", checkpoint=latest, steps=step)
        return
    known = {"status": "failed", "checkpoint": latest,
             **(getattr(failure, "metrics", None) or {})}  # e.g. status=preempted, steps so far
    if not isinstance(failure, FastpipeError):
        known["traceback"] = traceback.format_exc()
    elif "Original Traceback" in str(failure):  # raised in a DataLoader worker: its traceback is the text
        known["traceback"] = str(failure)
    reason = fixable_text(failure) if isinstance(failure, FastpipeError) else short(failure)
    if isinstance(failure, Unwritable):  # what the full disk left: the checkpoint to continue from
        reason += (f"; the newest good checkpoint, {latest}, is intact (train.resume=auto continues from it)"
                   if latest else "; no checkpoint was written")
    record.fail(reason, **known)


def write_record(recorder, record: RunRecord, run_dir: Path) -> None:
    """metrics.json where it can be written, then the loggers' ends (recorder.finish). A finished run whose
    record cannot be written (a full or read-only disk) fails, its results lost; an unfinished one's
    reason is said on stderr instead. A logger that cannot write (TensorBoard's last events on a full
    disk) is a warning of the record, as any logger's failure."""
    try:
        recorder.finish(record)
    except OSError as exc:
        problem = cannot_write(unwritable(exc) or exc, run_dir)
        if record.status != "ok":
            print(f"fastpipe: error: {record.reason} [{problem}]", file=sys.stderr, flush=True)
            return
        record.fail(str(problem))
        print(f"fastpipe: error: {problem}", file=sys.stderr, flush=True)
        raise problem from exc


def fixable_text(exc: FastpipeError) -> str:
    """The message; raised in a DataLoader worker, the original one (the last line of the wrapper's)."""
    text = str(exc)
    if WORKER.match(text) and "Original Traceback" in text:
        text = re.sub(r"^[\w.]+: ", "", text.strip().splitlines()[-1])  # drop "fastpipe.errors.DataError: "
    return text


def out_of_memory(settings, exc: BaseException) -> OutOfMemory:
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    fixes = memory_fixes(settings.train.batch_size, lower_precision(settings.precision.name),
                         settings.model.activation_checkpointing,
                         choice("launcher", settings.launcher.name).shards)
    return OutOfMemory(f"out of memory with train.batch_size={settings.train.batch_size} "
                       f"(precision={settings.precision.name}, model={settings.model.target}, "
                       f"launcher={settings.launcher.name}): {'; or '.join(fixes)} [{first}]")


def short(exc: BaseException) -> str:
    """``Type: first line``; for an exception a DataLoader worker raised, its own last line and the worker."""
    lines = str(exc).strip().splitlines() or [""]
    worker = WORKER.match(lines[0])
    if worker and "Original Traceback" in str(exc):
        return f"{lines[-1].strip()} (raised in {worker.group(2)})"[:500]
    return f"{type(exc).__name__}: {lines[0]}"[:500]
