"""A stream (IterableDataset) for tests: ``dataset._target_=stream_data.Counting`` (tests/support on the path)."""
from __future__ import annotations

import torch
from torch.utils.data import Dataset, IterableDataset


class CountingStream(IterableDataset):
    """Samples (float32[4] holding i, label i % 2) for i = 0, 1, ...: a sample names itself. Finite
    (``size`` samples), ``epoch_length`` per epoch; ``set_epoch`` shifts the start so epochs differ."""

    def __init__(self, size: int = 96, epoch_length: int = 96) -> None:
        self.size, self.epoch_length, self.epoch = size, epoch_length, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        for i in range(self.size):
            j = (i + self.epoch * 7) % self.size
            yield torch.full((4,), float(j)), j % 2


class Indexed(Dataset):
    """A held-out split of 32 such samples."""

    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int):
        return torch.full((4,), float(i)), i % 2


def counting(size: int = 96, epoch_length: int = 96) -> dict:
    stream = CountingStream(size, epoch_length)
    stream.num_classes = 2
    return {"train": stream, "val": Indexed()}


class SplittingStream(CountingStream):
    """CountingStream that splits itself: ``set_shard(index, count)`` makes it produce only samples
    ``index, index + count, ...``. Every sample it produces (reads) is appended to
    ``log/<pid>-<index>.txt``, with the reader's process id, so a test counts what each reader read."""

    def __init__(self, size: int = 96, epoch_length: int = 96, log: str = "") -> None:
        super().__init__(size, epoch_length)
        self.log, self.shard = log, (0, 1)

    def set_shard(self, index: int, count: int) -> None:
        self.shard = (index, count)

    def __iter__(self):
        import os

        index, count = self.shard
        with open(os.path.join(self.log, f"{os.getpid()}-{index}.txt"), "a") as f:
            for i in range(index, self.size, count):
                j = (i + self.epoch * 7) % self.size
                f.write(f"{j}\n")
                f.flush()
                yield torch.full((4,), float(j)), j % 2
