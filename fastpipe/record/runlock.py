"""One writer per run folder (and per sweep folder): an exclusive ``flock`` held by the job's owner.

The lock lives in ``<folder>/.fastpipe.lock``, which names its holder (pid, host, start time,
command line) for the message a second run gets. The kernel releases an ``flock`` when its holder
dies, however it dies, so a lock never outlives a dead run; the file itself stays (deleting a lock
file races with the next run that opens it).
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Optional

from fastpipe.errors import ConfigError
from fastpipe.files import LockBusy, file_lock

NAME = ".fastpipe.lock"


class FolderInUse(ConfigError):
    """Another live fastpipe run holds the folder."""


class RunLock:
    """``with RunLock(folder, "run"):`` or ``acquire()`` / ``release()``; re-entrant per process."""

    _held: dict = {}  # folder -> RunLock, so the same process may ask twice (a sweep job in its sweep)

    def __init__(self, folder: Path, what: str = "run") -> None:
        self.folder, self.what = Path(folder), what
        self._held_lock: Optional[ExitStack] = None

    def acquire(self) -> "RunLock":
        key = str(self.folder.resolve())
        if key in RunLock._held:
            return RunLock._held[key]
        self.folder.mkdir(parents=True, exist_ok=True)
        held = ExitStack()
        try:
            held.enter_context(file_lock(self.folder / NAME, wait=False, owner=_owner(_command())))
        except LockBusy as busy:
            hint = "hydra.sweep.dir" if self.what == "sweep" else "hydra.run.dir"
            raise FolderInUse(f"{self.what} folder {self.folder} is in use by another fastpipe run "
                              f"({_describe(busy.holder)}); wait for it to finish, or give this {self.what} its "
                              f"own {hint}") from None
        self._held_lock = held
        RunLock._held[key] = self
        return self

    def release(self) -> None:
        if self._held_lock is None:
            return
        RunLock._held.pop(str(self.folder.resolve()), None)
        self._held_lock.close()
        self._held_lock = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def hold_once_free(folder: Path, command: str) -> None:
    """Take ``folder``'s lock the moment its holder lets it go, and keep it for the rest of this process
    (a daemon thread waits for it; the kernel frees it as the process ends): a sweep job's training
    process whose sweep died still writes its checkpoint and record there, and no new run may start over
    it meanwhile. ``command``: what the lock file names as the holder."""
    import threading

    def hold() -> None:
        with contextlib.suppress(OSError), file_lock(Path(folder) / NAME, owner=_owner(command)):
            threading.Event().wait()

    threading.Thread(target=hold, name="fastpipe-hold-folder", daemon=True).start()


def _owner(command: str) -> str:
    """What the lock file says of its holder, for the message a second run gets."""
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "command": command})


def _command() -> str:
    argv = list(sys.argv)
    if argv and argv[0].endswith(("fastpipe/__main__.py", "fastpipe/__main__")):
        argv[0] = "python -m fastpipe"
    return " ".join(argv)[:500]


def _describe(text: str) -> str:
    try:
        info = json.loads(text)
    except ValueError:
        return "holder unknown"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("started", 0)))
    command = info.get("command", "")
    return f"pid {info.get('pid')} on {info.get('host')} since {started}" + (f": {command}" if command else "")


def free(folder: Path) -> bool:
    """Whether this machine can tell that no process holds ``folder``'s lock: its lock file is there and
    readable, was last taken on this host (another host's flock over a shared file system may not be
    seen here), and a shared lock on it is granted at once (probed read-only: no run is kept from
    starting meanwhile)."""
    import fcntl

    path = Path(folder) / NAME
    try:
        with open(path) as file:
            if json.loads(file.read() or "{}").get("host", socket.gethostname()) != socket.gethostname():
                return False
            fcntl.flock(file, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(file, fcntl.LOCK_UN)
            return True
    except (OSError, ValueError, AttributeError):  # missing, unreadable, held, or not a lock file of ours
        return False


def holder(folder: Path) -> Optional[str]:
    """Who holds ``folder``'s lock now, or None when nobody does."""
    path = Path(folder) / NAME
    if not path.is_file():
        return None
    try:
        with file_lock(path, wait=False):
            return None
    except LockBusy as busy:
        return _describe(busy.holder)
