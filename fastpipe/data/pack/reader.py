"""Pack files: ``PackReader`` opens and checks any pack; ``PackWriter`` (writer.py) writes one
sample at a time.

The byte layout is described in one place, format.py; the parallel, resumable builder of
images packs is build.py. The reader checks magic, version, sizes and the header checksum
when it opens a file, and ``verify()`` checks every chunk of data.
"""
from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import List, Optional

import numpy as np

from fastpipe.data.pack.format import (
    ALIGN,
    DTYPE_JPEG,
    DTYPE_RECORDS,
    DTYPE_UINT8,
    HEADER,
    MAGIC,
    READABLE_VERSIONS,
    REPACK,
    VAL,
    chunks_of,
)
from fastpipe.errors import DataError


class PackReader:
    """An open pack: header fields, ``labels``/``split`` arrays, and the data memory-mapped:
    ``images`` (N,H,W,3) for raw images and records, ``encoded(i)`` for JPEG images.

    Opening validates everything but the data bytes (magic, version, sizes, header checksum, label
    range, JPEG offsets); a file that fails raises DataError naming the file and the problem, and
    ``repair``: what mends it (a one-file pack's by default; a shard's is said by its sharded pack).
    """

    def __init__(self, path, repair: Optional[str] = None) -> None:
        self.path, self.repair = Path(path), repair
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                self._check_header(f.read(HEADER.size), size)
                f.seek(HEADER.size)
                covered_rest = f.read(self.data_offset - HEADER.size)
            self._check_index(covered_rest)
            shape = (int(self.offsets[-1]),) if self.is_jpeg else (self.count, self.height, self.width, self.channels)
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r", offset=self.data_offset, shape=shape)
        except FileNotFoundError:
            raise DataError(f"pack {self.path} does not exist; " + (repair or (
                f"create it with `python -m fastpipe.pack SRC {self.path}`, or set data.path=null to pack the "
                "dataset into the cache"))) from None
        except OSError as exc:
            raise DataError(f"pack {self.path} cannot be read: {exc}") from exc

    def _bad(self, what: str) -> DataError:
        return DataError(f"pack {self.path} {what}; {self.repair or REPACK}")

    def _check_header(self, raw: bytes, size: int) -> None:
        if len(raw) < HEADER.size:
            raise self._bad(f"is truncated: {size} bytes, shorter than the {HEADER.size}-byte header")
        (magic, version, self.header_crc, self.file_size, self.data_offset, self.count, self.height,
         self.width, self.channels, self.chunk_images, self.meta_size, self.dtype) = HEADER.unpack(raw)
        self._fields = raw[16:]
        if magic != MAGIC:
            raise DataError(f"{self.path} is not a fastpipe pack (bad magic bytes {magic!r}, expected "
                            f"{MAGIC!r}); give data.path a file written by `python -m fastpipe.pack`")
        if version not in READABLE_VERSIONS:
            raise self._bad(f"has format version {version}, but this fastpipe reads versions "
                            f"{', '.join(map(str, READABLE_VERSIONS))}")
        self.version = version
        if self.data_offset % ALIGN or not HEADER.size + self.meta_size <= self.data_offset <= self.file_size:
            raise self._bad(f"has a corrupt header (data offset {self.data_offset}, file size {self.file_size})")
        if size < self.data_offset:
            raise self._bad(f"is truncated: {size} bytes, shorter than its {self.data_offset}-byte header")
        self.actual_size = size

    def _check_index(self, rest: bytes) -> None:
        if zlib.crc32(self._fields + rest) != self.header_crc:
            raise self._bad("has a corrupt header (header checksum mismatch)")
        n, meta_end = self.count, self.meta_size
        first = {DTYPE_RECORDS: (2, "records"), DTYPE_JPEG: (3, "JPEG images")}.get(self.dtype)
        if first and self.version < first[0]:
            holds = "images only" if self.version == 1 else "raw images and records"
            raise self._bad(f"claims format version {self.version}, which holds {holds}, but stores {first[1]}")
        self.offsets = (np.frombuffer(rest, "<u8", n + 1, meta_end + 5 * n + 4 * self.num_chunks).astype(np.int64)
                        if self.dtype == DTYPE_JPEG else None)
        data_bytes = int(self.offsets[-1]) if self.is_jpeg else n * self.height * self.width * self.channels
        layout_ok = ((self.dtype in (DTYPE_UINT8, DTYPE_JPEG) and self.channels == 3) or
                     (self.dtype == DTYPE_RECORDS and self.height == self.channels == 1))
        if self.is_jpeg and (self.offsets[0] != 0 or (np.diff(self.offsets) <= 0).any()):
            layout_ok = False
        if self.file_size != self.data_offset + data_bytes or not layout_ok or self.chunk_images < 1:
            raise self._bad(f"has an inconsistent header ({n} images of {self.shape}, dtype code "
                            f"{self.dtype}, file size {self.file_size}, chunk {self.chunk_images})")
        if self.actual_size < self.file_size:
            raise self._bad(f"is truncated: {self.actual_size} bytes, the header says {self.file_size}")
        if self.actual_size > self.file_size:
            raise self._bad(f"has {self.actual_size - self.file_size} unexpected bytes after the images")
        try:
            self.meta = json.loads(rest[:meta_end].decode())
            self.classes = [str(c) for c in self.meta["classes"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise self._bad(f"has unreadable metadata ({exc})") from exc
        self.labels = np.frombuffer(rest, "<i4", n, meta_end).astype(np.int64)
        self.split = np.frombuffer(rest, np.uint8, n, meta_end + 4 * n)
        self.checksums = np.frombuffer(rest, "<u4", self.num_chunks, meta_end + 5 * n)
        if n and self.is_images and (self.labels.min() < 0 or self.labels.max() >= len(self.classes)):
            raise self._bad(f"has labels outside 0..{len(self.classes) - 1}")
        if n and self.split.max() > VAL:
            raise self._bad("has split flags other than 0 (train) and 1 (val)")

    @property
    def shape(self) -> tuple:
        return (self.height, self.width, self.channels)

    @property
    def is_images(self) -> bool:
        return self.dtype in (DTYPE_UINT8, DTYPE_JPEG)

    @property
    def is_jpeg(self) -> bool:
        return self.dtype == DTYPE_JPEG

    @property
    def codec(self) -> str:
        return "jpeg" if self.is_jpeg else "raw"

    @property
    def num_chunks(self) -> int:
        return chunks_of(self.count, self.chunk_images)

    @property
    def images(self) -> np.ndarray:
        """All images (records), N x H x W x 3 uint8, memory-mapped (reads fault pages in from the file)."""
        if self.is_jpeg:
            raise DataError(f"pack {self.path} stores JPEG files: read them with encoded(i)")
        return self._map

    def encoded(self, index: int) -> np.ndarray:
        """Image ``index``'s JPEG file, a uint8 view into the map (JPEG packs)."""
        return self._map[self.offsets[index]:self.offsets[index + 1]]

    def indices(self, split: int) -> np.ndarray:
        """The image indices of one split (TRAIN or VAL), ascending."""
        return np.flatnonzero(self.split == split)

    def chunk_range(self, chunk: int) -> range:
        return range(chunk * self.chunk_images, min(self.count, (chunk + 1) * self.chunk_images))

    def chunk_ok(self, chunk: int) -> bool:
        r = self.chunk_range(chunk)
        data = self._map[self.offsets[r.start]:self.offsets[r.stop]] if self.is_jpeg else self._map[r.start:r.stop]
        return zlib.crc32(data) == self.checksums[chunk]

    def bad_chunks(self, progress: bool = False, threads: int = 1) -> List[int]:
        """Every chunk whose data does not match its stored checksum (zlib drops the GIL)."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max(1, threads)) as pool:
            results = pool.map(self.chunk_ok, range(self.num_chunks))
            if progress:
                from tqdm import tqdm
                results = tqdm(results, total=self.num_chunks, desc=f"verifying {self.path.name}",
                               unit="chunk", leave=False, disable=None)
            return [c for c, ok in enumerate(results) if not ok]

    def verify(self, progress: bool = False, threads: int = 1) -> None:
        """Check every chunk checksum; DataError naming the bad chunk(s) and their images."""
        bad = self.bad_chunks(progress, threads)
        if bad:
            r = self.chunk_range(bad[0])
            more = f" (and {len(bad) - 1} more: chunks {bad[1:6]}{'...' if len(bad) > 6 else ''})" if len(bad) > 1 else ""
            raise self._bad(f"is corrupt: chunk {bad[0]} of {self.num_chunks} (images {r.start}..{r.stop - 1}) "
                            f"fails its crc32 checksum{more}")

    def describe(self) -> str:
        n_val = int((self.split == VAL).sum())
        if self.is_jpeg:
            what = (f"{self.height}x{self.width}x3 JPEG (quality {self.meta.get('quality', '?')}, "
                    f"{self.meta.get('chroma', '?')}, {self.offsets[-1] / max(1, self.count):,.0f} bytes/image), "
                    f"{len(self.classes)} classes")
        elif self.is_images:
            what = f"{self.height}x{self.width}x{self.channels} uint8, {len(self.classes)} classes"
        else:
            fields = ", ".join(f.get("where", f["name"]) for f in self.meta.get("fields", []))
            what = f"records of {self.width} bytes ({fields})"
        kind = "images" if self.is_images else "records"
        return (f"{self.path}: {self.count} {kind} ({self.count - n_val} train, {n_val} val), {what}, "
                f"{self.num_chunks} chunks of {self.chunk_images}, format v{self.version}")
