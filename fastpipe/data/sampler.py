"""The training sampler of file loaders: an order fixed by (seed, epoch), resumable part-way.

A resumed run must see the same batches as an uninterrupted one. DistributedSampler already draws
each epoch's permutation from ``seed + epoch`` alone (not from a generator whose state depends on
how many epochs this process has run), so it serves single-process runs too (one replica);
``skip_next`` makes the next epoch start part-way without reading the skipped samples.
"""
from __future__ import annotations

from typing import Iterator

from torch.utils.data import DistributedSampler


class ResumableSampler(DistributedSampler):
    """DistributedSampler (shuffled by ``seed + epoch``) whose next epoch can start ``n`` samples in."""

    def __init__(self, dataset, num_replicas: int = 1, rank: int = 0, seed: int = 0, drop_last: bool = True):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed,
                         drop_last=drop_last)
        self._skip = (0, 0)  # (epoch, samples)

    def skip_next(self, samples: int) -> None:
        """This epoch (the one ``set_epoch`` chose) leaves out its first ``samples`` indices: resume."""
        self._skip = (self.epoch, samples)

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())
        epoch, samples = self._skip
        return iter(indices[samples:] if epoch == self.epoch else indices)  # only the resumed epoch
