"""Streaming datasets (``torch.utils.data.IterableDataset``) under data=default: sharded over the
ranks and the DataLoader workers, an epoch of a documented length.

A stream has no random access, so it cannot be shuffled by index, split by index, packed for
data=mmap, or skipped without reading (a resumed epoch reads and drops what it already trained
on). Its epoch length is ``len(dataset)`` or its ``epoch_length`` attribute (samples per epoch over
all ranks). Readers are numbered rank by rank, worker by worker. A stream with ``set_shard(index,
count)`` is told, in the process that iterates it (each DataLoader worker, each time it starts
iterating; the main process with ``num_workers=0``), which reader it is, and yields only its own
share: nothing it reads is dropped. Any other stream is read whole by every reader, which keeps
every ``readers``-th sample (``i % readers == index``), and the run warns once about that cost. A
dataset with ``set_epoch(epoch)`` is told the epoch (its workers are started afresh each epoch so
that they see it).
"""
from __future__ import annotations

import itertools
import warnings
from typing import Iterator, Optional

from torch.utils.data import IterableDataset, get_worker_info

from fastpipe.errors import ConfigError, DataError, FastpipeWarning


def is_stream(dataset) -> bool:
    return isinstance(dataset, IterableDataset)


def epoch_length(dataset, name: str) -> int:
    """Samples per epoch of a stream (over all ranks)."""
    length = getattr(dataset, "epoch_length", None)
    if length is None:
        try:
            length = len(dataset)
        except TypeError:
            raise ConfigError(f"dataset={name} is a stream (an IterableDataset) without a length: define "
                              "__len__ or an epoch_length attribute (samples per epoch)") from None
    return int(length)


class Shard(IterableDataset):
    """This rank's share of ``stream``, split again between the DataLoader's workers.

    Training (``quota_per_worker`` set): each worker yields exactly that many samples, so every rank
    runs the same number of steps and the loader's length holds; held-out: every sample once.
    """

    def __init__(self, stream, rank: int, world: int, workers: int, quota_per_worker: Optional[int] = None,
                 name: str = "dataset") -> None:
        self.stream, self.rank, self.world, self.workers = stream, rank, world, max(1, workers)
        self.quota, self.name = quota_per_worker, name
        readers = self.world * self.workers
        if readers > 1 and not callable(getattr(stream, "set_shard", None)):
            warnings.warn(f"dataset={name} is a stream without set_shard(index, count): each of its {readers} readers "
                          f"({self.world} process(es) x {self.workers} DataLoader worker(s)) reads the whole stream "
                          f"and keeps one sample in {readers}: {readers}x the reading it needs; give the dataset a "
                          "set_shard(index, count) method that makes it yield only reader index's share "
                          "(docs/data.md#streams)", FastpipeWarning)

    def __len__(self) -> int:
        if self.quota is None:
            raise TypeError("a held-out shard has no fixed length")
        return self.quota * self.workers

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.stream, "set_epoch"):
            self.stream.set_epoch(epoch)

    def __iter__(self) -> Iterator:
        info = get_worker_info()
        worker = info.id if info is not None else 0
        reader, readers = self.rank * self.workers + worker, self.world * self.workers
        if callable(getattr(self.stream, "set_shard", None)):  # it splits itself: read only this share
            self.stream.set_shard(reader, readers)
            mine = iter(self.stream)
        else:
            mine = itertools.islice(iter(self.stream), reader, None, readers)
        if self.quota is None:
            yield from mine
            return
        count = 0
        for sample in itertools.islice(mine, self.quota):
            count += 1
            yield sample
        if count < self.quota:
            raise DataError(f"dataset={self.name} ended after {count} samples for one of its {readers} readers, "
                            f"short of the {self.quota} its epoch length gives each; lower its epoch_length "
                            "(or __len__) to what it yields")
