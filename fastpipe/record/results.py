"""A run folder's metrics.json: written atomically from a RunRecord, versioned per launch, read as a dict.

Every process that records a run (the trainer, the launcher after a crash, the entry point after bad
input, the repeat executor, the sweep launcher) writes a ``RunRecord`` (run_record.py) through
``write``, so a run always has a complete record. Readers get the file's dict (``read``, ``own``).
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Dict, Iterable, Optional

from fastpipe.files import atomic_write, temp_path
from fastpipe.record.run_record import RunRecord, failed

FILE = "metrics.json"
PREVIOUS = "metrics.previous.json"  # an earlier run's record in a reused folder


def _finite_or_none(value):
    """JSON has no NaN/inf: a non-finite measurement is recorded as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_none(v) for v in value]
    return value


def write_json_atomic(path: Path, payload: dict) -> None:
    """Write ``payload`` as JSON (non-finite numbers as null) via a temporary file, fsync and rename,
    so a reader never sees half a file."""
    atomic_write(path, json.dumps(_finite_or_none(payload), indent=2, default=str, allow_nan=False))


def write(run_dir: Path, record: RunRecord) -> None:
    """Write ``record`` as the run folder's metrics.json."""
    if not isinstance(record, RunRecord):  # a dict's keys are unchecked: RunRecord.from_dict checks them
        raise TypeError(f"results.write takes a RunRecord, not {type(record).__name__}")
    write_json_atomic(Path(run_dir) / FILE, record.to_dict())


def write_if_possible(run_dir: Path, record: RunRecord) -> bool:
    """Write the record of a run that did not finish where it can be written: on a full or read-only
    disk, one line on stderr instead of a second error over the first (the reason is printed anyway)."""
    try:
        write(run_dir, record)
        return True
    except OSError as exc:
        print(f"fastpipe: warning: {Path(run_dir) / FILE} not written ({exc.strerror or exc})", file=sys.stderr,
              flush=True)
        return False


def begin(run_dir: Path, choices: Dict[str, str], overrides: Iterable[str], run_id: str) -> None:
    """A run starts in ``run_dir``: an earlier run's record moves to ``metrics.previous.json`` (kept,
    never reported as this run's), and a ``running`` record of this run takes its place."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    old = run_dir / FILE
    kept = old.exists() and _keep_aside(old, run_dir / PREVIOUS)
    try:
        write(run_dir, failed("the run did not finish: its process died or is still running", choices, overrides,
                              run_id=run_id, status="running"))
    except BaseException:
        if kept:  # the earlier record must not stand as this run's: it is kept aside already
            old.unlink(missing_ok=True)
        raise


def _keep_aside(old: Path, previous: Path) -> bool:
    """``old`` also kept as ``previous``, while it stays in place until the new record replaces it (one
    rename), so that whoever reads the folder meanwhile finds a record: a hard link, or a copy where
    the file system has none. False when it could not be kept: then it moves aside, as before."""
    tmp = temp_path(previous)
    tmp.unlink(missing_ok=True)
    try:
        os.link(old, tmp)
        os.replace(tmp, previous)
        return True
    except OSError:
        tmp.unlink(missing_ok=True)
    try:
        atomic_write(previous, old.read_bytes(), fsync=False)
        return True
    except OSError:
        os.replace(old, previous)
        return False


def refuse_finished(run_dir: Path, resume) -> None:
    """A folder that holds a finished run (metrics.json says ``ok``) is never written over by another
    run: refused in one line, unless ``resume`` (``train.resume``) continues that run, which keeps its
    record (a finished run with nothing to train ends there)."""
    record = read(run_dir)
    if resume or not isinstance(record, dict) or record.get("status") != "ok":
        return
    from fastpipe.errors import ConfigError

    when = time.strftime("%Y-%m-%d %H:%M", time.localtime((Path(run_dir) / FILE).stat().st_mtime))
    raise ConfigError(f"hydra.run.dir={run_dir} holds a finished run (metrics.json: status ok, {record.get('steps')} "
                      f"steps, {when}): fastpipe never writes another run over it; give this run its own "
                      "hydra.run.dir (without it, each run gets a new dated folder), add train.resume=auto to "
                      "continue that run, or remove the folder")


def refuse_finished_sweep(sweep_dir: Path) -> None:
    """A sweep folder holding finished jobs (a job folder's metrics.json says ``ok``: a grid's ``N/``, a race's
    ``N/round-K/``, a halving sweep's probes, a repeat's ``repeat-K/``) is never swept over again: refused in
    one line, unless the sweep continues (``sweep.resume=true``, which skips its finished jobs)."""
    sweep_dir = Path(sweep_dir)
    done = sorted({path.parent for depth in ("*", "*/*", "*/*/*") for path in sweep_dir.glob(f"{depth}/{FILE}")
                   if isinstance(record := read(path.parent), dict) and record.get("status") == "ok"})
    if not done:
        return
    from fastpipe.errors import ConfigError

    raise ConfigError(f"hydra.sweep.dir={sweep_dir} holds a sweep whose {len(done)} job(s) finished "
                      f"({done[0].relative_to(sweep_dir)}/ first): fastpipe never sweeps over them; add "
                      "sweep.resume=true to continue that sweep (its finished jobs are kept), or give this sweep its "
                      "own hydra.sweep.dir (without it, each sweep gets a new dated folder)")


def own(run_dir: Path, run_id: Optional[str]) -> Optional[dict]:
    """The run folder's record if this run (``run_id``) wrote it, else None."""
    record = read(run_dir)
    return record if record is not None and record.get("run_id") == run_id else None


DIED = ("its process died before it recorded an outcome (killed by SIGKILL or the out-of-memory killer, or a crash "
        "such as a segfault); continue it with train.resume=auto hydra.run.dir={run_dir} if it wrote checkpoints")


def outcome(run_dir: Path) -> Optional[dict]:
    """The folder's record as its readers take it (the report, a load): one left ``running`` whose folder
    no process holds any more (record/runlock.py: the kernel frees the lock of a process however it dies)
    is a run whose process died, read as ``failed`` with that reason; the file is left as it is. Where
    that cannot be told (no lock file, another host's), it stays ``running``."""
    from fastpipe.record.runlock import free

    record = read(run_dir)
    if not isinstance(record, dict) or record.get("status") != "running" or not free(run_dir):
        return record
    return died(record, run_dir)


def died(record: dict, run_dir: Path) -> dict:
    """``record``, left ``running`` by a process that is gone, as the failed run it is."""
    return dict(record, status="failed", reason=DIED.format(run_dir=run_dir))


def read(run_dir: Path, name: str = FILE) -> Optional[dict]:
    """The run folder's record (``name``: or its earlier one), or None when it has none (or an unreadable one)."""
    try:
        return json.loads((Path(run_dir) / name).read_text())
    except (OSError, ValueError):
        return None


def before(run_dir: Path, run_id: Optional[str]) -> Optional[dict]:
    """The record the run before this one (``run_id``) left in ``run_dir``: metrics.json, or, once this
    run's launch began its own record there (``begin``), metrics.previous.json."""
    current = read(run_dir)
    if current is not None and current.get("status") == "running" and current.get("run_id") == run_id:
        return read(run_dir, PREVIOUS)
    return current
