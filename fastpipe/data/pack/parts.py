"""The files of a pack being built: where each shard starts and ends, and each file's resumable writer."""
from __future__ import annotations

import json
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import numpy as np

from fastpipe.data.pack.format import (DTYPE_JPEG, MAGIC, TRAIN, VAL, chunks_of, data_offset_for, header_region,
                                      index_bytes)
from fastpipe.data.pack.journal import Journal, partial_path
from fastpipe.data.pack.reader import PackReader
from fastpipe.errors import ConfigError, DataError
from fastpipe.files import commit

INDEX_NAME = "index.json"


@dataclass
class Part:
    """One output file: positions ``first .. first + count - 1`` of the pack order."""

    file: str
    first: int
    count: int


def plan_parts(split: np.ndarray, chunk: int, per_shard: int) -> List[Part]:
    """Shards of at most ``per_shard`` images (a multiple of ``chunk``), each of one split."""
    per_shard = max(chunk, per_shard // chunk * chunk)
    n_train = int((split == TRAIN).sum())
    parts: List[Part] = []
    for begin, end in ((0, n_train), (n_train, len(split))):
        for start in range(begin, end, per_shard):
            parts.append(Part(f"shard-{len(parts):05d}.fppack", start, min(per_shard, end - start)))
    return parts


LAYOUT_NAME = ".layout.json"  # a sharded build's plan, written before its first shard


def _other_kind(out: Path, sharded: bool) -> Optional[str]:
    """What ``out`` holds when it is not what this build writes (a file for a one-file pack, a folder for shards)."""
    if sharded and out.is_file():
        with open(out, "rb") as f:
            return "pack file" if f.read(len(MAGIC)) == MAGIC else "file"
    is_shards = out.is_dir() and ((out / INDEX_NAME).is_file() or (out / LAYOUT_NAME).is_file())
    if not sharded and out.is_dir():
        return "sharded pack's folder" if is_shards else "folder"
    if sharded and out.is_dir() and not is_shards and any(out.iterdir()):
        return "folder of other files"  # never written into, nor removed by --force
    return None


def check_out(out: Path, sharded: bool, force: bool) -> None:
    """Refuse, before any packing, an ``out`` of the other kind: a sharded pack's folder for a one-file
    pack, a pack file for shards (``force``: it is replaced), or anything else (never removed)."""
    kind = _other_kind(out, sharded)
    if kind == "sharded pack's folder" and not force:
        raise ConfigError(f"{out} is a sharded pack's folder: add the --shard-size it was packed with to reuse it, "
                          "--force to replace it with a one-file pack, or choose another OUT")
    if kind == "pack file" and not force:
        raise ConfigError(f"{out} is a pack file: drop --shard-size to reuse it, --force to replace it with a "
                          "sharded pack's folder, or choose another OUT")
    if kind == "folder":
        raise ConfigError(f"{out} is a folder but not a sharded pack's: give OUT a pack file's name (or add "
                          "--shard-size to write shards into a new folder)")
    if kind == "file":
        raise ConfigError(f"{out} is a file but not a pack: --shard-size writes a folder; choose another OUT")
    if kind == "folder of other files":
        raise ConfigError(f"{out} is a folder that holds other files, not a sharded pack: --shard-size writes its "
                          "shards into a new or empty folder; choose another OUT (--force never removes it)")


def refuse_another_pack(out: Path, ours: dict, force: bool) -> None:
    """A finished pack at ``out`` that another packing wrote (other files or settings: its build key, or a
    records pack's dataset identity, differs from ``ours``) is replaced only with ``force``."""
    if force:
        return
    try:
        if out.is_dir():
            theirs, what = json.loads((out / INDEX_NAME).read_text()), "a sharded pack"
        elif out.is_file():
            reader = PackReader(out)
            theirs, what = reader.meta, reader.describe().removeprefix(f"{out}: ")
        else:
            return
    except (DataError, OSError, ValueError):  # unfinished or damaged: the builder resumes or replaces it
        return
    if any(theirs.get(k) is not None and theirs.get(k) != v for k, v in ours.items()):
        raise ConfigError(f"{out} holds a pack of other files or settings ({what}): packing these into it would "
                          "replace it; add --force to replace it, or choose another OUT")


def remove_other_kind(out: Path, sharded: bool) -> None:
    """``--force``: remove the pack of the other kind at ``out`` (``check_out`` has said it is one)."""
    kind = _other_kind(out, sharded)
    if kind == "sharded pack's folder":
        shutil.rmtree(out)
    elif kind == "pack file":
        out.unlink()


def complete_file(out: Path, key: str, trust_name: bool = False) -> bool:
    """``out`` is a finished pack of this build (its key in the metadata or the index; a sharded pack's
    every shard there at its indexed size, so that packing again replaces a lost or cut one)."""
    try:
        if out.is_dir():
            if not (out / INDEX_NAME).is_file():
                return False
            index = json.loads((out / INDEX_NAME).read_text())
            whole = all((out / s["file"]).is_file() and (out / s["file"]).stat().st_size == s["bytes"]
                        for s in index.get("shards", []))
            return whole and (trust_name or index.get("build_key") == key)
        return out.is_file() and (trust_name or PackReader(out).meta.get("build_key") == key)
    except (DataError, OSError, ValueError):
        return False


class PartWriter:
    """Writes one file of the pack into ``.NAME.partial`` with its journal, resuming what a dead
    builder left when the journal and the bytes agree, and renames it when complete."""

    def __init__(self, final: Path, part: Part, job, order: np.ndarray, dtype: int, sharded: bool) -> None:
        self.final, self.part, self.job, self.dtype, self.sharded = final, part, job, dtype, sharded
        self.items = order[part.first:part.first + part.count]
        self.k = job.chunk_images
        self.jpeg = dtype == DTYPE_JPEG
        extra = {"codec": "jpeg", "quality": job.quality, "chroma": "4:4:4"} if self.jpeg else {}
        shard = {"shard": {"first": part.first, "count": part.count}} if sharded else {}
        self.meta = json.dumps({**(job.meta or {}), **extra, **shard, "build_key": job.key,
                                "classes": list(job.classes), "dtype": "uint8", "layout": "NHWC"},
                               sort_keys=True).encode()
        self.data_offset = data_offset_for(len(self.meta), part.count, self.k, self.jpeg)
        self.head = {"key": job.key, "file": final.name, "first": part.first, "count": part.count,
                     "data_offset": self.data_offset, "codec": job.codec, "shape": list(job.shape)}
        self.groups = chunks_of(part.count, self.k)
        self.crcs: List[Optional[int]] = [None] * self.groups
        self.sizes: List[Optional[list]] = [None] * self.groups
        self.cursor, self.done, self.file, self.journal = self.data_offset, False, None, None

    # positions are indices into the pack order; groups are this file's checksum chunks
    def group_size(self, g: int) -> int:
        return min(self.k, self.part.count - g * self.k)

    def offset_of(self, start: int) -> Optional[int]:
        return None if self.jpeg else self.data_offset + (start - self.part.first) * self.job.image_bytes

    def todo(self):
        return [(g, self.part.first + g * self.k, self.part.first + g * self.k + self.group_size(g))
                for g in range(self.groups) if self.crcs[g] is None and not self.done]

    def finished(self) -> bool:
        return not self.done and all(c is not None for c in self.crcs)

    def resume(self) -> int:
        """Open the partial file (keeping the journalled groups whose bytes check out); images kept."""
        if self.sharded and self._final_ok():
            self.done = True
            return self.part.count
        partial = partial_path(self.final)
        entries = Journal.entries(self.final, self.head) if partial.exists() else []
        self.file = open(partial, "r+b" if partial.exists() else "w+b")
        kept = self._check(entries)
        if not self.jpeg:
            self.file.truncate(self.data_offset + self.part.count * self.job.image_bytes)
        self.journal = Journal(self.final, self.head, kept)
        return sum(self.group_size(e["g"]) for e in kept)

    def _final_ok(self) -> bool:
        """A finished shard of this build (same metadata) whose every chunk checks out: kept."""
        if not self.final.is_file():
            return False
        try:
            reader = PackReader(self.final)
            ok = reader.meta == json.loads(self.meta) and not reader.bad_chunks()
        except DataError:
            ok = False
        if not ok:
            self.final.unlink()
        return ok

    def _check(self, entries: List[dict]) -> List[dict]:
        kept = []
        for e in entries:
            g = e.get("g")
            if not isinstance(g, int) or not 0 <= g < self.groups or self.crcs[g] is not None:
                continue
            if self.jpeg:  # appended in order: keep the longest prefix that checks out
                length = sum(e.get("sizes") or [-1])
                if g != len(kept) or length <= 0 or len(e["sizes"]) != self.group_size(g):
                    break
                start = self.cursor
            else:
                start, length = self.data_offset + g * self.k * self.job.image_bytes, self.group_size(g) * self.job.image_bytes
            self.file.seek(start)
            if zlib.crc32(self.file.read(length)) != e.get("crc"):
                if self.jpeg:
                    break
                continue
            self.crcs[g], self.sizes[g] = e["crc"], e.get("sizes")
            self.cursor += length if self.jpeg else 0
            kept.append(e)
        if self.jpeg:
            self.file.truncate(self.cursor)
        return kept

    def add(self, g: int, crc: int, data: Optional[bytes], sizes: Optional[list]) -> None:
        """Group ``g`` is done: raw, its bytes are already in place; JPEG, append them (groups come in order)."""
        entry = {"g": g, "crc": crc}
        if self.jpeg:
            self.file.seek(self.cursor)
            self.file.write(data)
            self.cursor += len(data)
            entry["sizes"] = sizes
        self.crcs[g], self.sizes[g] = crc, sizes
        self.journal.append(entry)

    def finish(self) -> None:
        """Index and header at the front, then fsync and rename: the name appears complete or not at all."""
        if self.done:
            return
        labels, split = self.job.labels[self.items], self.job.split[self.items]
        offsets = np.concatenate([[0], np.cumsum([s for g in self.sizes for s in g])]) if self.jpeg else None
        data_bytes = int(offsets[-1]) if self.jpeg else self.part.count * self.job.image_bytes
        region = header_region(self.data_offset, data_bytes, self.part.count, (*self.job.shape, 3), self.k, self.meta,
                               self.dtype, index_bytes(self.meta, labels, split, self.crcs, offsets))
        self.file.seek(0)
        self.file.write(region)
        self.file.truncate(self.data_offset + data_bytes)
        commit(self.file, partial_path(self.final), self.final)
        self.file.close()
        self.journal.close(remove=True)
        self.done = True

    def summary(self) -> dict:
        """This shard's line in the index: where it sits and what it must look like when opened."""
        reader = PackReader(self.final)
        return {"file": self.final.name, "first": self.part.first, "count": self.part.count,
                "train": int((reader.split == TRAIN).sum()), "val": int((reader.split == VAL).sum()),
                "bytes": reader.file_size, "header_crc": reader.header_crc}

