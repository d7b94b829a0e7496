"""Writing into fastpipe's cache: temporary names, leftovers of dead writers, unwritable folders.

Every cached folder or file is written under a temporary name and renamed when complete; a writer
killed half-way leaves its temporary behind, which the next writer of the same name removes.
"""
from __future__ import annotations

import errno
import os
import shutil
import socket
from contextlib import contextmanager, suppress
from pathlib import Path

from fastpipe.errors import DataError

CACHE_FIX = "set FASTPIPE_CACHE to a writable folder"
# The errors a user fixes by choosing another folder (a file where a folder should be included).
WRITE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR,
                          errno.EEXIST})


def tmp_sibling(final: Path) -> Path:
    """``NAME.tmp-HOST-PID`` beside ``final``: the host is in the name because a cache shared by
    several machines holds other machines' writers, whose PIDs mean nothing here."""
    return final.with_name(f"{final.name}.tmp-{socket.gethostname()}-{os.getpid()}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_dead_tmp(final: Path) -> None:
    """Remove ``final``'s temporary siblings whose writer, a process of this machine, has died
    (``NAME.tmp-HOST-PID``, or an older fastpipe's ``NAME.tmp-PID``). Best effort: a read-only cache is left as is."""
    prefix, host = f"{final.name}.tmp-", socket.gethostname()
    try:
        leftovers = [p for p in final.parent.iterdir() if p.name.startswith(prefix)]
    except OSError:
        return
    for tmp in leftovers:
        owner, _, pid = tmp.name[len(prefix):].rpartition("-")
        if not pid.isdigit() or owner not in ("", host) or _alive(int(pid)):
            continue
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            with suppress(OSError):
                tmp.unlink()


def _cannot_create(exc: OSError, folder: Path) -> bool:
    """ENOENT on ``folder`` or one of its parents: a folder that cannot be created (``/proc/x``) although
    its parent exists. An ENOENT on a file inside (a source image gone) is no cache problem."""
    if exc.errno != errno.ENOENT or not exc.filename:
        return False
    failed = Path(os.fsdecode(exc.filename))
    return failed == Path(folder) or failed in Path(folder).parents


@contextmanager
def writing_into(folder: Path, fix: str = CACHE_FIX):
    """Writes into ``folder``: a permission, read-only, disk-full, not-a-folder or cannot-create error becomes one
    DataError naming the folder and ``fix`` instead of a traceback."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in WRITE_ERRNOS and not _cannot_create(exc, folder):
            raise
        why = exc.strerror + (f": {exc.filename}" if exc.filename else "")
        if exc.errno in (errno.EEXIST, errno.ENOTDIR):  # a file where the cache needs a folder
            why = f"not a folder: {exc.filename}"
        elif exc.errno == errno.ENOENT:  # its parent exists but refuses new folders (/proc, a stale mount)
            why = f"cannot create {exc.filename}"
        raise DataError(f"cannot write to {folder} ({why}); {fix}") from exc
