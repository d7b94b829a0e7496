"""The training sampler of map-style datasets: an order fixed by (seed, epoch), resumable part-way.

A resumed run must see the same batches as an uninterrupted one, so each epoch's order is drawn
from ``seed + epoch`` alone (as torch's DistributedSampler draws it), not from a generator whose
state depends on how many epochs this process has run. A dataset may define its epoch itself:
``epoch_indices(seed, epoch)`` (e.g. random token windows, drawn with replacement) and
``epoch_length`` (samples per epoch). ``skip_next`` makes the next epoch start part-way without
reading the skipped samples: the first samples of the epoch's order over all processes, so a
resume on another number of processes leaves out the same samples.

Where an epoch starts: a resumed run skips the batches of its epoch already trained on.
"""
from __future__ import annotations

from typing import Iterator, List

import torch
from torch.utils.data import Sampler


def epoch_order(dataset, seed: int, epoch: int) -> List[int]:
    """Every sample index of one epoch, in training order (the same on every rank)."""
    draw = getattr(dataset, "epoch_indices", None)
    if callable(draw):
        return torch.as_tensor(draw(seed, epoch)).tolist()
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    return torch.randperm(len(dataset), generator=g).tolist()


def epoch_size(dataset) -> int:
    return int(getattr(dataset, "epoch_length", None) or len(dataset))


class EpochSampler(Sampler[int]):
    """This rank's share of each epoch's order: ranks take interleaved slices of equal length."""

    def __init__(self, dataset, num_replicas: int = 1, rank: int = 0, seed: int = 0, drop_last: bool = True):
        self.dataset, self.num_replicas, self.rank, self.seed = dataset, num_replicas, rank, seed
        n = epoch_size(dataset)
        self.num_samples = n // num_replicas if drop_last else -(-n // num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.epoch = 0
        self._skip = (0, 0)  # (epoch, samples)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def skip_next(self, samples: int) -> None:
        """This epoch (the one ``set_epoch`` chose) starts ``samples`` per process in: the first
        ``samples x processes`` positions of the epoch's order are left out on every rank (resume)."""
        self._skip = (self.epoch, samples * self.num_replicas)

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        indices = epoch_order(self.dataset, self.seed, self.epoch)
        if len(indices) < self.total_size:  # pad by repeating the start (drop_last=false)
            indices += (indices * (-(-self.total_size // max(1, len(indices)))))[:self.total_size - len(indices)]
        epoch, skipped = self._skip
        start = skipped if epoch == self.epoch else 0  # only the resumed epoch
        return iter(indices[start:self.total_size][self.rank::self.num_replicas])


def epoch_batches(loader, epoch: int, skip_batches: int):
    """An iterator over ``epoch`` of ``loader`` that starts ``skip_batches`` batches in."""
    loader.set_epoch(epoch)
    if skip_batches and getattr(loader, "skip_next", lambda n: False)(skip_batches):
        return iter(loader)  # the sampler leaves them out unread
    batches = iter(loader)
    for _ in range(skip_batches):  # a loader that cannot skip: read and drop (same order by set_epoch)
        next(batches)
    return batches
