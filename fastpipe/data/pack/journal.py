"""What a pack builder leaves behind to be resumed, and the lock that lets one process build at a time.

A file being built is ``.NAME.partial`` beside its final name, with ``.NAME.journal``: a first line
saying what the file is (the build's key and the file's layout), then one line per finished group
of images (its index, crc32 and, for JPEG, each image's byte length), each line ending in its own
crc32 so that a line torn by a kill is ignored. A builder that finds them (its predecessor died:
the lock was free) keeps only the groups whose bytes in the partial file still match their
journalled checksum, and builds the rest. Lines are not synced: a group lost in a crash simply
fails that check and is built again.
"""
from __future__ import annotations

import json
import os
import sys
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional

from fastpipe.files import atomic_write, file_lock


def partial_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.partial")


def journal_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.journal")


def _line(entry: dict) -> str:
    text = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    return f"{text}\t{zlib.crc32(text.encode()):08x}\n"


def _parse(line: str) -> Optional[dict]:
    text, _, crc = line.rstrip("\n").rpartition("\t")
    try:
        return json.loads(text) if f"{zlib.crc32(text.encode()):08x}" == crc else None
    except ValueError:
        return None


class Journal:
    """The journal of one file being built: ``head`` first, then ``append(entry)`` per finished group."""

    def __init__(self, final: Path, head: dict, entries: List[dict] = ()) -> None:
        self.path = journal_path(final)
        # a kill never leaves a journal that mixes two builds; not synced, as its lines are not
        atomic_write(self.path, "".join(_line(e) for e in [head, *entries]), fsync=False)
        self.file = open(self.path, "a")

    @staticmethod
    def entries(final: Path, head: dict) -> List[dict]:
        """The intact entries of ``final``'s journal if its head is ``head`` (the same build), else []."""
        try:
            lines = journal_path(final).read_text().splitlines(keepends=True)
        except (OSError, UnicodeDecodeError):
            return []
        if not lines or _parse(lines[0]) != head:
            return []
        parsed = [_parse(line) for line in lines[1:]]
        return [e for e in parsed if e is not None]

    def append(self, entry: dict) -> None:
        self.file.write(_line(entry))
        self.file.flush()  # in the kernel: survives this process being killed

    def close(self, remove: bool = False) -> None:
        self.file.close()
        if remove:
            self.path.unlink(missing_ok=True)


@contextmanager
def build_lock(final: Path, what: str, quiet: bool = False) -> Iterator[bool]:
    """Hold ``.NAME.lock`` beside ``final`` while building it; yields whether another process held it
    first (this one waited, saying so on stderr unless ``quiet``). The kernel drops the lock when
    its holder dies."""
    def say_so(holder: str) -> None:
        if not quiet:
            print(f"fastpipe: waiting for process {holder or '?'}, which is packing {what}", file=sys.stderr,
                  flush=True)

    with file_lock(final.with_name(f".{final.name}.lock"), on_wait=say_so, owner=str(os.getpid())) as waited:
        yield waited
