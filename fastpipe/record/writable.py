"""A run or sweep folder fastpipe can write, checked before anything is written into it.

Hydra's first write into a run folder is its job log (``hydra/job_logging``'s file handler): on a
read-only or full disk that is Hydra's own logging traceback, and later writes fail one after the
other. ``check_writable`` creates the folder and writes, syncs and removes a small file in it first
(fastpipe's RunGuard callback calls it as the run or sweep starts), so such a folder is one line
naming it and the fix, whatever the user's ``hydra/job_logging``.
"""
from __future__ import annotations

import os
from pathlib import Path

from fastpipe.errors import cannot_write, unwritable
from fastpipe.files import sync_file

PROBE_BYTES = 4096  # one block: a disk without room for it fails here, not in the middle of a run


def check_writable(folder: Path, key: str) -> None:
    """Raise ``Unwritable`` (naming ``folder`` and ``key``, the setting that chose it) unless ``folder``
    can be created and a file written into it."""
    folder = Path(folder)
    probe = folder / f".fastpipe-write-check-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
            sync_file(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        error = unwritable(exc) or exc
        raise cannot_write(OSError(error.errno, error.strerror, str(folder)), folder, key) from exc
    finally:
        try:
            probe.unlink()
        except OSError:
            pass
