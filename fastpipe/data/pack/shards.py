"""Sharded packs: a folder of pack files (``shard-NNNNN.fppack``, each a complete pack that verifies
on its own) and ``index.json``, which lists them in order with their sizes and header checksums.

A sharded pack stores the training images first, shuffled once (a fixed seed, the same for every
codec), then the held-out ones; each shard holds one split. Sample ``i`` of the pack is image
``i - first`` of the shard whose range holds it. ``PackSet`` is what the loader reads: one pack
file, or the shards of a sharded pack that this process needs, opened (and verified) only those.
"""
from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Dict, Iterable, List, Optional

import numpy as np

from fastpipe.data.pack.format import TRAIN
from fastpipe.data.pack.parts import INDEX_NAME
from fastpipe.data.pack.reader import PackReader
from fastpipe.errors import DataError
from fastpipe.files import atomic_write

INDEX_FORMAT, INDEX_VERSION = "fastpipe-shards", 1
REPACK_SHARDS = "repack it with `python -m fastpipe.pack SRC OUT --shard-size SIZE`"


def shard_repair(folder: Path, shard: str) -> str:
    """What mends one bad shard: the same pack command again packs only the shards missing, cut short or
    (deleted first) corrupt; a one-file pack's advice would write a whole pack under a shard's name."""
    return (f"it is a shard of the sharded pack {folder}: delete {shard} if it is there, then run the command "
            f"that packed the folder again, `python -m fastpipe.pack SRC {folder} --shard-size SIZE` with its SRC "
            "and settings: it packs only the shards that are missing")


def _crc(index: dict) -> int:
    return zlib.crc32(json.dumps({k: v for k, v in index.items() if k != "crc"}, sort_keys=True).encode())


def write_index(out: Path, job, shards: List[dict]) -> Path:
    """``out/index.json`` (written last, atomically: a folder without it is an unfinished pack)."""
    index = {"format": INDEX_FORMAT, "version": INDEX_VERSION, "build_key": job.key, "classes": list(job.classes),
             "codec": job.codec, "stored_size": list(job.shape), "chunk_images": job.chunk_images,
             "count": sum(s["count"] for s in shards), "train": sum(s["train"] for s in shards),
             "val": sum(s["val"] for s in shards), "order": "train shuffled (seed 0), then val",
             "meta": job.meta or {}, "shards": shards}
    index["crc"] = _crc(index)
    atomic_write(out / INDEX_NAME, json.dumps(index, indent=1))
    return out / INDEX_NAME


def index_of(path: Path) -> Optional[Path]:
    """The index file ``path`` names (the index itself or its folder), or None for a pack file."""
    path = Path(path)
    if path.is_dir():
        return path / INDEX_NAME
    return path if path.suffix == ".json" else None


def pack_version(path: Path) -> tuple:
    """What tells this version of a pack (its file, or a sharded pack's index) from a later one written
    at the same path: (inode, size, modification time). Raises FileNotFoundError for a missing pack."""
    st = (index_of(path) or Path(path)).stat()
    return st.st_ino, st.st_size, st.st_mtime_ns


def read_index(path: Path) -> dict:
    try:
        index = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"sharded pack index {path} does not exist; give data.path (or --verify) a pack file, "
                        f"a sharded pack's folder or its {INDEX_NAME}") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"sharded pack index {path} cannot be read ({exc}); {REPACK_SHARDS}") from None
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT:
        raise DataError(f"{path} is not a fastpipe sharded pack index; {REPACK_SHARDS}")
    if index.get("version") != INDEX_VERSION:
        raise DataError(f"sharded pack index {path} has version {index.get('version')}, but this fastpipe reads "
                        f"version {INDEX_VERSION}; {REPACK_SHARDS}")
    if index.get("crc") != _crc(index):
        raise DataError(f"sharded pack index {path} is corrupt (checksum mismatch); {REPACK_SHARDS}")
    return index


class PackSet:
    """One pack file, or a sharded pack: ``count``, ``classes``, ``split`` facts from the header or
    index, and ``reader(shard)`` / ``locate(positions)`` to reach sample data."""

    def __init__(self, path, verify: bool = False, threads: int = 1) -> None:
        self.path, self.verify, self.threads = Path(path), verify, threads
        self.index_path = index_of(self.path)
        self._readers: Dict[int, PackReader] = {}
        if self.index_path is None:  # one pack file: shard 0
            reader = PackReader(self.path)
            self._readers[0] = reader
            self.shards = [{"file": self.path.name, "first": 0, "count": reader.count}]
            self.classes, self.count, self.codec = reader.classes, reader.count, reader.codec
            self.stored = (reader.height, reader.width)
            self.is_images, self.meta = reader.is_images, reader.meta
            self._split = reader.split
        else:
            index = read_index(self.index_path)
            self.shards, self.classes, self.count = index["shards"], index["classes"], index["count"]
            self.codec, self.stored, self.is_images = index["codec"], tuple(index["stored_size"]), True
            self.meta = {**index["meta"], "classes": self.classes}
            self._split = np.concatenate([np.full(s["count"], TRAIN if s["train"] else 1, np.uint8) for s in self.shards])
        self.starts = np.asarray([s["first"] for s in self.shards], dtype=np.int64)
        if verify and self.index_path is None:
            self._readers[0].verify(threads=threads)

    @property
    def sharded(self) -> bool:
        return self.index_path is not None

    @property
    def split(self) -> np.ndarray:
        return self._split

    def indices(self, split: int) -> np.ndarray:
        return np.flatnonzero(self._split == split)

    def shards_of(self, positions: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, positions, side="right") - 1

    def open(self, shards: Iterable[int]) -> None:
        """Open (and with verify, check every chunk of) these shards now: a bad one fails before training."""
        for s in sorted(set(int(x) for x in shards)):
            self.reader(s)

    def reader(self, shard: int) -> PackReader:
        reader = self._readers.get(shard)
        if reader is None:
            entry = self.shards[shard]
            path = self.index_path.parent / entry["file"]
            repair = shard_repair(self.index_path.parent, entry["file"])
            reader = PackReader(path, repair)
            if (reader.file_size, reader.header_crc, reader.count) != (entry["bytes"], entry["header_crc"], entry["count"]):
                raise DataError(f"shard {path} does not match its index {self.index_path} (another file of "
                                f"{reader.file_size} bytes); {repair}")
            if self.verify:
                reader.verify(threads=self.threads)
            self._readers[shard] = reader
        return reader

    def any_reader(self) -> PackReader:
        """An opened shard if there is one, else the first shard opened unverified (a look at its format)."""
        if self._readers:
            return next(iter(self._readers.values()))
        return PackReader(self.index_path.parent / self.shards[0]["file"],
                          shard_repair(self.index_path.parent, self.shards[0]["file"]))

    def runs(self, positions: np.ndarray):
        """(shard reader, local indices, slice of ``positions``) for each run of one shard in sorted ``positions``."""
        shards = self.shards_of(positions)
        cuts = np.flatnonzero(np.diff(shards)) + 1
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(positions)]):
            s = int(shards[a])
            yield self.reader(s), positions[a:b] - self.starts[s], slice(int(a), int(b))

    def labels(self, positions: np.ndarray) -> np.ndarray:
        out = np.empty(len(positions), dtype=np.int64)
        for reader, local, where in self.runs(positions):
            out[where] = reader.labels[local]
        return out

    def describe(self) -> str:
        if not self.sharded:
            return self._readers[0].describe()
        return (f"{self.index_path.parent}: {len(self.shards)} shards, {self.count} images, "
                f"{self.stored[0]}x{self.stored[1]} {self.codec}, {len(self.classes)} classes")


def verify_sharded(path: Path, progress: bool = False, threads: int = 1) -> str:
    """Check the index and every shard on its own; DataError naming each bad shard file."""
    pack = PackSet(path)
    bad = []
    for s in range(len(pack.shards)):
        try:
            reader = pack.reader(s)
            reader.verify(progress=progress, threads=threads)
        except DataError as exc:
            bad.append(str(exc))
    if bad:
        more = f" ({len(bad) - 1} more shard(s) are bad too)" if len(bad) > 1 else ""
        raise DataError(bad[0] + more)
    return pack.describe()
