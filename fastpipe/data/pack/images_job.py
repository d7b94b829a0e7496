"""What an images pack is built from: the image files in pack order, their labels and splits, the
stored size, the codec, the shard size, and the key that says which build a pack or a partial file
belongs to (reuse and resume require the same key)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

from fastpipe.data.pack.format import TRAIN

SHARD_SEED = 0  # the fixed shuffle of a sharded pack's training images (the same for every codec)


@dataclass
class ImagesJob:
    """What to pack: image files in pack order (train first), their labels and splits, and how."""

    files: List[str]
    labels: List[int]
    split: List[int]
    classes: List[str]
    shape: Tuple[int, int]  # stored (height, width)
    codec: str = "raw"  # raw | jpeg
    quality: int = 90
    chunk_images: int = 256
    meta: Optional[dict] = None
    key: str = ""  # what the pack is built from: reuse and resume require the same key
    shard_bytes: Optional[int] = None  # None: one file; else shards of about this many bytes

    def __post_init__(self) -> None:
        self.labels, self.split = np.asarray(self.labels, dtype=np.int64), np.asarray(self.split, dtype=np.uint8)

    @property
    def image_bytes(self) -> int:
        return self.shape[0] * self.shape[1] * 3

    def order(self) -> np.ndarray:
        """Item ids in the order they are stored: sharded packs shuffle the training images once
        (fixed seed), so every shard holds a sample of every class and sequential reads stay random."""
        ids = np.arange(len(self.files))
        if not self.shard_bytes:
            return ids
        train, val = ids[self.split == TRAIN], ids[self.split != TRAIN]
        return np.concatenate([np.random.default_rng(SHARD_SEED).permutation(train), val])
