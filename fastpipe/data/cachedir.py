"""Writing into fastpipe's cache: temporary names, leftovers of dead writers, unwritable folders.

Every cached folder or file is written under a temporary name and renamed when complete; a writer
killed half-way leaves its temporary behind, which the next writer of the same name removes.

Checks that run once per version of what they check: a stamp in the cache says it passed.

Reading every image header of a folder or every byte of a pack protects a run from data that would
fail it later, but repeating the check before each run puts seconds on its critical path for data
that has not changed. So a check that passed leaves a stamp under ``<cache>/checked/``, named by a
hash of what identifies that version of the data (each file's path, size and modification time; a
pack's inode, size and modification time): the same data is not checked again, while a file
replaced, edited, added or removed gives another name and is checked again in full. The stamp
records when the check ran. A cache that cannot be written is no error: the check then runs every time.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import socket
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Callable, Iterable, Optional

from fastpipe.errors import DataError
from fastpipe.files import atomic_write


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


FOLDER = "checked"


def version_key(kind: str, parts: Iterable[str]) -> str:
    """A short hash naming one version of the checked data (``kind``: which check)."""
    h = hashlib.blake2b(digest_size=12)
    h.update(kind.encode())
    for part in parts:
        h.update(b"\0" + part.encode())
    return f"{kind}-{h.hexdigest()}"


def files_key(kind: str, paths: Iterable[str]) -> Optional[str]:
    """The key of a check of these files: each one's path, size and modification time (None: a file
    is gone, and the check itself will say so)."""
    try:
        return version_key(kind, (f"{path}\0{st.st_size}\0{st.st_mtime_ns}" for path in paths
                                  for st in (os.stat(path),)))
    except OSError:
        return None


def run_once(cache_root: Optional[Path], key: Optional[str], check: Callable[[], None]) -> Optional[str]:
    """``check()`` (which raises when the data is bad), unless the stamp ``key`` says it passed; a
    check that passes is stamped. Returns when it passed earlier, or None when it ran now."""
    earlier = passed_at(cache_root, key) if key is not None else None
    if earlier is None:
        check()
        if key is not None:
            stamp(cache_root, key)
    return earlier


def passed_at(cache_root: Optional[Path], key: str) -> Optional[str]:
    """When the check named ``key`` passed (the stamp's time), or None: not yet, or no cache."""
    if cache_root is None:
        return None
    try:
        return json.loads((Path(cache_root) / FOLDER / key).read_text()).get("passed_at")
    except (OSError, ValueError):
        return None


def stamp(cache_root: Optional[Path], key: str) -> None:
    """Record that the check named ``key`` passed now (best effort: whole or absent, never half)."""
    if cache_root is None:
        return
    folder = Path(cache_root) / FOLDER
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # no fsync: a stamp lost in a power cut only means the check runs once more
        atomic_write(folder / key, json.dumps({"passed_at": time.strftime("%Y-%m-%d %H:%M:%S")}), fsync=False)
    except OSError:  # a read-only or full cache: the check simply runs again next time
        pass
