"""``PackWriter``: a pack written one image (or record) at a time, atomically (temporary file,
fsync, rename). Records packs use it; images packs are built in parallel by build.py."""
from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np

from fastpipe.data.pack.format import (
    DEFAULT_CHUNK_IMAGES,
    DTYPE_RECORDS,
    DTYPE_UINT8,
    data_offset_for,
    header_region,
    index_bytes,
)
from fastpipe.errors import DataError
from fastpipe.files import commit, temp_path


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
        self.data_offset = data_offset_for(len(self.meta), self.count, chunk_images, jpeg=False)
        self.tmp = temp_path(self.path)
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
        index = index_bytes(self.meta, self.labels, self.split, self.crcs)
        self.file.seek(0)
        self.file.write(header_region(self.data_offset, self.count * int(np.prod(self.shape)), self.count, self.shape,
                                      self.chunk_images, self.meta, self.dtype_code, index))
        commit(self.file, self.tmp, self.path)  # the name says the pack exists only once its bytes are on disk
