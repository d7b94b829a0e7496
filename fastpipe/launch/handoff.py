"""A job's settings handed to its spawned training processes through a file in the run folder.

CPython's spawn start method writes the pickled process object into a pipe while it still holds that
pipe's read end, so a child killed before it has read everything (the out-of-memory killer while it
imports) leaves the launching process blocked on the write for ever once the payload outgrows the
pipe's 64 KB buffer: a large ``code.diff`` in the run's context, a dataset config listing many files.
The processes get the file's path instead; the launcher removes the file once they have ended.
"""
from __future__ import annotations

import contextlib
import pickle
from pathlib import Path
from typing import Iterator

from fastpipe.config import Config
from fastpipe.files import atomic_write


@contextlib.contextmanager
def settings_file(settings: Config, run_dir: Path) -> Iterator[str]:
    """The path of a file holding ``settings`` for the duration of the launch."""
    path = Path(run_dir) / f".settings-{settings.run_id}.pkl"
    # a reader never sees half a file; not synced: the file lives as long as the launch
    atomic_write(path, pickle.dumps(settings, protocol=pickle.HIGHEST_PROTOCOL), fsync=False)
    try:
        yield str(path)
    finally:
        path.unlink(missing_ok=True)


def read_settings(path: str) -> Config:
    """In a training process: the settings its launcher handed over."""
    return pickle.loads(Path(path).read_bytes())
