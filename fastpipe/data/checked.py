"""Checks that run once per version of what they check: a stamp in the cache says it passed.

Reading every image header of a folder or every byte of a pack protects a run from data that would
fail it later, but repeating the check before each run puts seconds on its critical path for data
that has not changed. So a check that passed leaves a stamp under ``<cache>/checked/``, named by a
hash of what identifies that version of the data (each file's path, size and modification time; a
pack's inode, size and modification time): the same data is not checked again, while a file
replaced, edited, added or removed gives another name and is checked again in full. The stamp
records when the check ran. A cache that cannot be written is no error: the check then runs every time.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

from fastpipe.files import atomic_write

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
