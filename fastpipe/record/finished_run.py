"""A finished run's folder kept as it was through a command that does not train it.

``train.resume`` into a folder whose run finished (metrics.json: ok) continues that run, but the command
may be refused (settings its checkpoint cannot take) or find nothing to train. Either way it must leave
the run's record, its ``.hydra/`` and its weights as they were, with the folder's protection against
another run (record/results.py ``refuse_finished``). Before such a launch ``keep`` copies every file
outside ``checkpoints/`` aside (beside the folder) and notes what ``checkpoints/`` holds; after it,
``put_back`` restores those files and removes the ones the launch added, when ``checkpoints/`` is as it
was: no step was trained and checkpointed, no weights were written, so the folder is the finished run's
again. A launch that trained keeps what it wrote.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Dict, Tuple

from fastpipe.record.runlock import NAME as LOCK_NAME

CHECKPOINTS = "checkpoints"
_KEPT: Dict[Path, Tuple[Path, dict]] = {}  # folder -> (the copy aside, checkpoints/'s listing)


def _listing(folder: Path) -> dict:
    """``checkpoints/``: each file's path, size and modification time."""
    out = {}
    for path in sorted((folder / CHECKPOINTS).rglob("*")):
        if path.is_file():
            st = path.stat()
            out[str(path.relative_to(folder))] = (st.st_size, st.st_mtime_ns)
    return out


def _record_files(folder: Path):
    """Every file of the folder outside ``checkpoints/``, but its lock (held by the launch)."""
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if path.is_file() and rel.parts[0] != CHECKPOINTS and rel.name != LOCK_NAME:
            yield rel


def keep(folder: Path) -> None:
    """Before a launch that resumes the finished run in ``folder``: its files aside. Where they cannot be
    copied (the parent folder is read-only), nothing is kept and the launch goes on."""
    folder = Path(folder).absolute()
    aside = folder.parent / f".{folder.name}.kept-{os.getpid()}"
    try:
        shutil.rmtree(aside, ignore_errors=True)
        for rel in _record_files(folder):
            (aside / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(folder / rel, aside / rel)
    except OSError:
        shutil.rmtree(aside, ignore_errors=True)
        return
    _KEPT[folder] = (aside, _listing(folder))


def put_back(folder: Path) -> bool:
    """After the launch: the folder as ``keep`` found it, unless the launch trained (``checkpoints/`` changed);
    True when it was put back. The copy aside is removed either way."""
    folder = Path(folder).absolute()
    kept = _KEPT.pop(folder, None)
    if kept is None:
        return False
    aside, listing = kept
    try:
        if _listing(folder) != listing:
            return False
        before = set(_record_files(aside))
        for rel in set(_record_files(folder)) - before:  # what the launch added: .hydra's, tb/'s new events
            (folder / rel).unlink(missing_ok=True)
        for rel in before:
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(aside / rel, folder / rel)
        return True
    finally:
        shutil.rmtree(aside, ignore_errors=True)
