"""The fastpipe pack: a dataset's images decoded once, stored as one memory-mappable uint8 array.

Layout (all integers little-endian; this table is the format's one description, docs/data.md links here):

    offset  size  field
         0     8  magic            b"\\x89FPPACK\\n"
         8     4  version          u32, FORMAT_VERSION
        12     4  header_crc       u32, zlib.crc32 of bytes [16, data_offset): fields, metadata, index
        16     8  file_size        u64, total bytes; a shorter file is truncated
        24     8  data_offset      u64, where the images start (a multiple of 4096, page aligned)
        32     8  count            u64, number of images (both splits)
        40     4  height           u32, stored image height (records: 1)
        44     4  width            u32, stored image width (records: bytes per record)
        48     4  channels         u32, 3 (RGB) (records: 1)
        52     4  chunk_images     u32, images (records) per checksum chunk (the last may be shorter)
        56     4  meta_size        u32, bytes of the JSON metadata
        60     4  dtype            u32, 1 = uint8 images; 2 = records (version 2)
        64  meta_size             JSON: classes, dtype, layout, source, settings; records: "fields"
         .  4*count  labels        i32 per image (records: 0)
         .    count  split         u8 per image: 0 = train, 1 = held-out (val)
         .  4*chunks checksums     u32 zlib.crc32 of each chunk's image bytes
         .        .  zero padding up to data_offset
    data_offset  count*height*width*channels  images, uint8, N x H x W x C (row-major); or records

Version 2 adds the records kind (dtype code 2): each record is one sample of any dataset whose
samples are fixed-shape tensors or numbers, its fields laid out at the byte offsets the metadata's
"fields" list gives (name, dtype, shape, offset) and "structure" (how the fields form (input,
target)); fastpipe/data/records.py reads and writes them. Version 1 files (images only) still read.

The writer is atomic (temporary file, fsync, rename); the reader checks magic, version, sizes and
the header checksum when it opens a file, and ``verify()`` checks every chunk of image data.
"""
from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np

from fastpipe.errors import DataError

MAGIC = b"\x89FPPACK\n"  # a high byte first: a text-mode copy or a stray text file cannot match
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
HEADER = struct.Struct("<8sIIQQQIIIIII")  # the fixed 64-byte header above
ALIGN = 4096  # images start on a page boundary so they can be memory-mapped directly
DTYPE_UINT8 = 1  # images: N x H x W x 3 uint8
DTYPE_RECORDS = 2  # records of any fixed layout (version 2)
DEFAULT_CHUNK_IMAGES = 256
TRAIN, VAL = 0, 1
REPACK = "repack it with `python -m fastpipe.pack SRC OUT` (or delete it: a cached pack is rebuilt)"


def _index_bytes(meta: bytes, labels: np.ndarray, split: np.ndarray, crcs: Sequence[int]) -> bytes:
    body = meta + labels.astype("<i4").tobytes() + split.astype(np.uint8).tobytes()
    return body + np.asarray(crcs, dtype="<u4").tobytes()


class PackWriter:
    """Write a pack atomically: ``with PackWriter(...) as w: w.write(img)`` once per image, in order.

    The file appears under ``path`` only after every image was written and synced; an interrupted
    pack leaves at most a ``.tmp-<pid>`` file that no reader will take for a pack.
    """

    def __init__(self, path, height: int, width: int, classes: List[str], labels: Sequence[int],
                 split: Sequence[int], meta: Optional[dict] = None,
                 chunk_images: int = DEFAULT_CHUNK_IMAGES, record_bytes: Optional[int] = None) -> None:
        self.path = Path(path)
        self.dtype_code = DTYPE_UINT8 if record_bytes is None else DTYPE_RECORDS
        self.shape = (height, width, 3) if record_bytes is None else (1, record_bytes, 1)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.split = np.asarray(split, dtype=np.uint8)
        if len(self.labels) != len(self.split) or len(self.labels) == 0:
            raise DataError(f"cannot pack {self.path}: {len(self.labels)} labels and {len(self.split)} "
                            "split flags; need one of each per image, and at least one image")
        self.count, self.chunk_images = len(self.labels), chunk_images
        layout = {"dtype": "uint8", "layout": "NHWC"} if record_bytes is None else {"kind": "records"}
        self.meta = json.dumps({**(meta or {}), "classes": list(classes), **layout}, sort_keys=True).encode()
        index_len = len(_index_bytes(self.meta, self.labels, self.split, [0] * self.num_chunks))
        self.data_offset = -(-(HEADER.size + index_len) // ALIGN) * ALIGN
        self.tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        self.crcs: List[int] = []
        self.written = 0

    @property
    def num_chunks(self) -> int:
        return -(-self.count // self.chunk_images)

    def __enter__(self) -> "PackWriter":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.tmp, "wb")
        self.file.seek(self.data_offset)  # the header is written last, once the checksums are known
        return self

    def write(self, image: np.ndarray) -> None:
        """Append one H x W x 3 uint8 image (the next in label/split order)."""
        if self.dtype_code == DTYPE_RECORDS:
            image = np.asarray(image).reshape(self.shape)  # one record's bytes
        if image.shape != self.shape or image.dtype != np.uint8:
            raise DataError(f"cannot pack {self.path}: image {self.written} is {image.dtype} "
                            f"{tuple(image.shape)}, expected uint8 {self.shape}")
        if self.written == self.count:
            raise DataError(f"cannot pack {self.path}: more images than the {self.count} labels given")
        data = np.ascontiguousarray(image).tobytes()
        if self.written % self.chunk_images == 0:
            self.crcs.append(0)
        self.crcs[-1] = zlib.crc32(data, self.crcs[-1])
        self.file.write(data)
        self.written += 1

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self._finish()
        finally:
            self.file.close()
            if self.tmp.exists():  # only left when something failed: never looks like a pack
                self.tmp.unlink()

    def _finish(self) -> None:
        if self.written != self.count:
            raise DataError(f"cannot pack {self.path}: {self.written} images written, {self.count} expected")
        index = _index_bytes(self.meta, self.labels, self.split, self.crcs)
        file_size = self.data_offset + self.count * int(np.prod(self.shape))
        fields = struct.pack("<QQQIIIIII", file_size, self.data_offset, self.count, *self.shape,
                             self.chunk_images, len(self.meta), self.dtype_code)  # header bytes 16..64
        covered = fields + index + bytes(self.data_offset - HEADER.size - len(index))
        self.file.seek(0)
        self.file.write(MAGIC + struct.pack("<II", FORMAT_VERSION, zlib.crc32(covered)) + covered)
        self.file.flush()
        os.fsync(self.file.fileno())  # the data is on disk before the name says the pack exists
        os.replace(self.tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # and so is the rename
        finally:
            os.close(dir_fd)


class PackReader:
    """An open pack: header fields, ``labels``/``split`` arrays, and ``images`` (N,H,W,3) memory-mapped.

    Opening validates everything but the image bytes (magic, version, sizes, header checksum, label
    range); a file that fails raises DataError naming the file and the problem.
    """

    def __init__(self, path) -> None:
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                self._check_header(f.read(HEADER.size), size)
                f.seek(HEADER.size)
                covered_rest = f.read(self.data_offset - HEADER.size)
            self._check_index(covered_rest)
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r", offset=self.data_offset,
                                  shape=(self.count, self.height, self.width, self.channels))
        except FileNotFoundError:
            raise DataError(f"pack {self.path} does not exist; create it with `python -m fastpipe.pack SRC "
                            f"{self.path}`, or set data.path=null to pack the dataset into the cache") from None
        except OSError as exc:
            raise DataError(f"pack {self.path} cannot be read: {exc}") from exc

    def _bad(self, what: str) -> DataError:
        return DataError(f"pack {self.path} {what}; {REPACK}")

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
        expected = self.data_offset + self.count * self.height * self.width * self.channels
        if self.dtype == DTYPE_RECORDS and self.version < 2:
            raise self._bad(f"claims format version {self.version}, which holds images only, but stores records")
        layout_ok = ((self.dtype == DTYPE_UINT8 and self.channels == 3) or
                     (self.dtype == DTYPE_RECORDS and self.version >= 2 and self.height == self.channels == 1))
        if self.file_size != expected or not layout_ok or self.chunk_images < 1:
            raise self._bad(f"has an inconsistent header ({self.count} images of {self.shape}, dtype code "
                            f"{self.dtype}, file size {self.file_size}, chunk {self.chunk_images})")
        if self.actual_size < self.file_size:
            raise self._bad(f"is truncated: {self.actual_size} bytes, the header says {self.file_size}")
        if self.actual_size > self.file_size:
            raise self._bad(f"has {self.actual_size - self.file_size} unexpected bytes after the images")
        meta_end = self.meta_size
        try:
            self.meta = json.loads(rest[:meta_end].decode())
            self.classes = [str(c) for c in self.meta["classes"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise self._bad(f"has unreadable metadata ({exc})") from exc
        n = self.count
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
        return self.dtype == DTYPE_UINT8

    @property
    def num_chunks(self) -> int:
        return -(-self.count // self.chunk_images)

    @property
    def images(self) -> np.ndarray:
        """All images, N x H x W x 3 uint8, memory-mapped (reads fault pages in from the file)."""
        return self._map

    def indices(self, split: int) -> np.ndarray:
        """The image indices of one split (TRAIN or VAL), ascending."""
        return np.flatnonzero(self.split == split)

    def chunk_range(self, chunk: int) -> range:
        return range(chunk * self.chunk_images, min(self.count, (chunk + 1) * self.chunk_images))

    def chunk_ok(self, chunk: int) -> bool:
        r = self.chunk_range(chunk)
        return zlib.crc32(self._map[r.start:r.stop]) == self.checksums[chunk]

    def bad_chunks(self, progress: bool = False, threads: int = 1) -> List[int]:
        """Every chunk whose image bytes do not match its stored checksum (zlib drops the GIL)."""
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
        what = (f"{self.height}x{self.width}x{self.channels} uint8, {len(self.classes)} classes" if self.is_images
                else f"records of {self.width} bytes ({', '.join(f.get('where', f['name']) for f in self.meta.get('fields', []))})")
        kind = "images" if self.is_images else "records"
        return (f"{self.path}: {self.count} {kind} ({self.count - n_val} train, {n_val} val), {what}, "
                f"{self.num_chunks} chunks of {self.chunk_images}, format v{self.version}")
