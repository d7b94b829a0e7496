"""The errors fastpipe raises for bad input: each message names the problem and the fix.

The entry point prints them as one line (no traceback) and exits with ``EXIT_CODE``.
"""
import errno
from pathlib import Path
from typing import Optional

EXIT_CODE = 2


class FastpipeError(Exception):
    """A problem the user can fix; the message says what is wrong and what to do."""


class ConfigError(FastpipeError):
    """A setting that cannot work (bad value, missing key, unknown choice)."""


class DataError(FastpipeError):
    """A dataset or packed file that is missing, empty, unreadable or corrupt."""


def no_full_batch(samples: int, batch_size: int, world_size: int) -> DataError:
    """The one message of every loader whose epoch holds no full batch for each process."""
    return DataError(f"{samples} training samples give no full batch of {batch_size} per process over {world_size} "
                     "process(es); lower train.batch_size or set data.drop_last=false")


class ProjectError(FastpipeError):
    """A project's dataset, collate_fn, model or task gives what training cannot use (samples of
    different shapes, a tuple where the task takes logits, token ids past the model's vocabulary);
    the message names the part at fault and the split. ``metrics``: merged into the failed
    metrics.json (the project code's own traceback, when it raised)."""

    def __init__(self, message: str, metrics: dict = None) -> None:
        super().__init__(message)
        self.metrics = metrics or {}


class EnvironmentProblem(FastpipeError):
    """Something the run needs from the machine is absent (CUDA, DALI, a module)."""


FULL = (errno.ENOSPC, errno.EDQUOT)  # no room: a full disk, or the user's quota
READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)  # a read-only file system, or a folder this user cannot write


def unwritable(exc: BaseException) -> Optional[OSError]:
    """The OSError in ``exc`` or its causes that says a file could not be written (a full disk, a
    read-only or forbidden folder), or None. torch.save reports a full disk as a RuntimeError
    ("unexpected pos") whose context is that OSError."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in FULL + READ_ONLY:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


class Unwritable(EnvironmentProblem):
    """A file fastpipe writes cannot be written: a full disk, a read-only or forbidden folder."""


def cannot_write(error: OSError, run_dir: Optional[Path] = None, key: str = "hydra.run.dir") -> Unwritable:
    """The one line for ``error`` (from ``unwritable``): the file, why, and the fix; ``run_dir``: the
    folder ``key`` chose, when the file is in it."""
    where = error.filename or "a file"
    inside = run_dir is not None and error.filename and Path(error.filename).resolve().is_relative_to(
        Path(run_dir).resolve())
    if error.errno in FULL:
        fix = (f"free space on its disk, or give {key} a folder on a disk with room" if inside else
               "free space on its disk")
        return Unwritable(f"no space left on the disk of {where} ({error.strerror}); {fix}")
    fix = f"give {key} a folder you can write" if inside else "make it writable"
    return Unwritable(f"cannot write {where} ({error.strerror}); {fix}")


class TrainingError(FastpipeError):
    """Training cannot go on (e.g. the loss stayed non-finite)."""

    def __init__(self, message: str, metrics: dict = None) -> None:
        super().__init__(message)
        self.metrics = metrics or {}  # merged into the failed metrics.json (steps, nonfinite_steps, ...)


# sysexits.h EX_TEMPFAIL, "try again later": a requeue script resumes with train.resume=auto.
EXIT_PREEMPTED = 75


class Preempted(TrainingError):
    """SIGTERM/SIGUSR1 stopped training at a step boundary, after a checkpoint was written."""

    exit_code = EXIT_PREEMPTED
    status = "preempted"


class OutOfMemory(FastpipeError):
    """The device ran out of memory; the message lists the settings that lower it."""


def memory_fixes(batch_size, lower_precision: Optional[str], activation_checkpointing: bool, sharded: bool) -> list:
    """The settings that lower memory and are not already applied, the costliest change last:
    ``batch_size`` (an int or ``auto``), the precision choice that would lower memory (``precision=amp``;
    None when the run's already does: config/registry.py's ``lower_precision``), and whether the
    launcher shards."""
    fixes = []
    if batch_size == "auto":
        fixes.append("lower train.batch_size_max, or set train.batch_size=N below the size the search chose "
                     "(graph.txt)")
    elif batch_size != 1:
        fixes.append("lower train.batch_size (train.grad_accum keeps the effective batch)")
    if lower_precision:
        fixes.append(f"use {lower_precision}")
    if not activation_checkpointing:
        fixes.append("set model.activation_checkpointing=true")
    if sharded:
        fixes.append("shard over more GPUs (launcher.nproc_per_node, launcher.nnodes)")
    else:
        fixes.append("shard weights, gradients and optimizer state over several GPUs with launcher=fsdp")
    return fixes


class FastpipeWarning(UserWarning):
    """Something about the run worth knowing that does not stop it (a setting that does nothing, a
    compile fall-back). Raised with ``warnings.warn(text, FastpipeWarning)`` where it is found; the
    job collects each into metrics.json's ``warnings`` (record/notes.py) and the summary shows them."""
