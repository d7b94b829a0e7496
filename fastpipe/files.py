"""Files that are whole or absent, and one process at a time: atomic writes and ``flock`` locks.

``atomic_write`` writes into a temporary file beside the target (``.NAME.tmp-PID``, so a glob can
find a dead writer's leftovers), optionally fsyncs it, and renames it over the target: a reader
sees the old file or the whole new one, never half, and a failed write leaves the old file as it
was and no temporary behind. ``commit`` is its last step, for a file written over a long time
(a pack). ``file_lock`` holds an exclusive ``flock``, which the kernel drops when its holder dies,
however it dies, so a lock never outlives a dead process.
"""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Callable, Iterator, Optional, Union

Data = Union[bytes, str, Callable[[IO[bytes]], None]]


def temp_path(path: Path) -> Path:
    """``.NAME.tmp-PID`` beside ``path``: hidden, and this process's own."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def sync_file(file) -> None:
    """Flush ``file`` (an open file object, or a descriptor) to the disk: the one fsync of a file's bytes."""
    if not isinstance(file, int):
        file.flush()
        file = file.fileno()
    os.fsync(file)


def fsync_folder(folder: Path) -> None:
    """Sync ``folder``'s entries: a rename into it survives a power cut."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit(file: IO, tmp: Path, path: Path, sync_folder: bool = True) -> None:
    """Flush and fsync ``file`` (open on ``tmp``), rename ``tmp`` to ``path``, then (``sync_folder``)
    sync the folder: the name says the file exists only once its bytes are on disk."""
    sync_file(file)
    os.replace(tmp, path)
    if sync_folder:
        fsync_folder(Path(path).parent)


def atomic_write(path, data: Data, *, fsync: bool = True, sync_folder: bool = False,
                 before_replace: Optional[Callable[[Path], None]] = None) -> None:
    """Replace ``path`` with ``data`` (bytes, text written as UTF-8, or a function that writes into the
    open binary file) through a temporary file and a rename. ``fsync``: the bytes are on disk before
    the rename; ``sync_folder``: the rename is too, once this returns. ``before_replace(tmp)`` runs
    just before the rename. Any failure (a full disk, a signal) removes the temporary file and raises."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        with open(tmp, "wb") as file:
            if callable(data):
                data(file)
            else:
                file.write(data.encode() if isinstance(data, str) else data)
            if fsync:
                sync_file(file)
            else:
                file.flush()
        if before_replace is not None:
            before_replace(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_folder:
        fsync_folder(path.parent)


class LockBusy(BlockingIOError):
    """``file_lock(..., wait=False)``: another process holds the lock. ``holder`` is the text it wrote
    into the lock file (``owner``), empty if none."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is locked by another process")
        self.path, self.holder = path, holder


@contextmanager
def file_lock(path, *, wait: bool = True, on_wait: Optional[Callable[[str], None]] = None,
              owner: Optional[str] = None) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) for the ``with`` block; yields
    whether another process held it first. When one does: ``wait=False`` raises ``LockBusy`` at
    once; otherwise ``on_wait(holder)`` (the holder's ``owner`` text) is called, then this waits.
    ``owner``: text written into the file while this process holds it (who it is, for the next one).
    The file itself stays: removing a lock file races with the next process that opens it."""
    with open(path, "a+") as file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            waited = False
        except BlockingIOError:
            file.seek(0)
            holder = file.read().strip()
            if not wait:
                raise LockBusy(Path(path), holder) from None
            if on_wait is not None:
                on_wait(holder)
            fcntl.flock(file, fcntl.LOCK_EX)
            waited = True
        holder_pid = os.getpid()
        try:
            if owner is not None:
                file.seek(0)
                file.truncate()
                file.write(owner)
                file.flush()
            yield waited
        finally:
            # Unlocked explicitly: a forked child that inherited the descriptor would otherwise keep it.
            # Only by the process that locked: the lock belongs to the descriptor, which a forked child
            # shares, and a child finalizing its copy of this generator must not unlock its parent's.
            if os.getpid() == holder_pid:
                fcntl.flock(file, fcntl.LOCK_UN)
