"""Which training samples of a sharded pack each rank reads, in which order, epoch by epoch.

The pack's training samples (positions ``0 .. n-1``, shards in order) are cut into ``V`` lanes,
contiguous ranges of equal length; rank ``r`` of ``W`` owns lanes ``r*V/W .. (r+1)*V/W - 1``, one
contiguous range of the pack, so it only ever opens (and verifies) the shards under it. Each
training step takes ``c = B*W/V`` samples from every lane (``B`` per rank), so after ``S`` samples of
an epoch every lane has given ``S/V``, whatever ``W`` and ``B``: a resume on another number of
processes leaves out exactly the samples trained on. That needs ``W`` to divide ``V`` and ``V`` to
divide ``B*W``; ``V`` is 64, or fewer for a small pack (``n / 16`` rounded down to a power of
two), and when the condition fails the lanes are the ranks themselves (``V = W``: exact resumes on
the same number of processes only).

A lane's order for an epoch, drawn from (seed, epoch, lane): a fresh permutation of its samples
(``shuffle_buffer=0``); or, for packs larger than memory, its shard pieces in a shuffled order,
each read front to back, through a shuffle buffer of ``shuffle_buffer / V`` samples (at least 2:
a smaller buffer would read every epoch in the same order, so it is refused). A lane one
sample longer than the others (``n`` not a multiple of ``V``) leaves out a different one each epoch.
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np

from fastpipe.errors import ConfigError

MAX_LANES = 64
MIN_LANE = 16  # samples: smaller packs get fewer lanes


def lane_count(n: int, world: int, batch: int) -> int:
    """V for ``n`` training samples on ``world`` ranks of ``batch`` samples each."""
    lanes = 1
    while lanes * 2 <= min(MAX_LANES, max(1, n // MIN_LANE)):
        lanes *= 2
    return lanes if lanes % world == 0 and (batch * world) % lanes == 0 else world


def buffered(order: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """``order`` through a shuffle buffer of ``size``: each incoming sample replaces a random one
    of the buffer, which goes out; what is left goes out shuffled at the end."""
    if size <= 1 or len(order) <= 1:
        return order.copy()
    size = min(size, len(order))
    buf, out = list(order[:size]), np.empty(len(order), dtype=order.dtype)
    picks = rng.integers(0, size, len(order) - size)
    for t, (x, j) in enumerate(zip(order[size:].tolist(), picks.tolist())):
        out[t], buf[j] = buf[j], x
    out[len(order) - size:] = rng.permutation(np.asarray(buf, dtype=order.dtype))
    return out


class LanePlan:
    """This rank's training positions of a sharded pack (``shard_starts``: each shard's first position)."""

    def __init__(self, n: int, shard_starts: np.ndarray, world: int, rank: int, batch: int, seed: int,
                 shuffle_buffer: int, drop_last: bool) -> None:
        self.n, self.world, self.rank, self.batch, self.seed = n, world, rank, batch, seed
        self.shuffle_buffer, self.drop_last = shuffle_buffer, drop_last
        self.lanes = lane_count(n, world, batch)
        if 0 < shuffle_buffer < 2 * self.lanes:  # 1 sample a lane: each lane read in the same order every epoch
            raise ConfigError(
                f"data.shuffle_buffer={shuffle_buffer} shuffles nothing: the pack is read in {self.lanes} lanes, "
                f"{shuffle_buffer} // {self.lanes} = {shuffle_buffer // self.lanes} sample a lane; use "
                f"data.shuffle_buffer={2 * self.lanes} or more, 0 (a fresh permutation every epoch), or auto")
        self.per_step = batch * world // self.lanes  # samples each lane gives per step
        self.length, extra = divmod(n, self.lanes)
        self.bounds = [(l * self.length + min(l, extra), (l + 1) * self.length + min(l + 1, extra))
                       for l in range(self.lanes)]
        self.mine = range(rank * self.lanes // world, (rank + 1) * self.lanes // world)
        self.shard_starts = np.asarray(shard_starts, dtype=np.int64)
        full, rest = divmod(self.length, self.per_step)
        self.steps = full if drop_last or rest == 0 else full + 1

    def owned(self) -> Tuple[int, int]:
        """The range of positions this rank ever reads."""
        return self.bounds[self.mine.start][0], self.bounds[self.mine.stop - 1][1]

    def per_rank(self) -> int:
        per_lane = self.steps * self.per_step if self.drop_last else self.length
        return min(per_lane, self.length) * len(self.mine)

    def _lane_order(self, lane: int, epoch: int) -> np.ndarray:
        start, stop = self.bounds[lane]
        rng = np.random.default_rng([self.seed % 2**32, epoch, lane])
        if self.shuffle_buffer <= 0:
            order = start + rng.permutation(stop - start)
        else:  # the lane's pieces of each shard, in a shuffled order, each front to back
            cuts = [c for c in self.shard_starts if start < c < stop]
            pieces = [np.arange(a, b) for a, b in zip([start, *cuts], [*cuts, stop])]
            order = np.concatenate([pieces[i] for i in rng.permutation(len(pieces))])
            order = buffered(order, max(1, self.shuffle_buffer // self.lanes), rng)
        return order[:self.length]  # a longer lane leaves out a different sample each epoch

    def epoch(self, epoch: int, skip_steps: int = 0) -> List[np.ndarray]:
        """This rank's batches of ``epoch`` (positions, each batch sorted), the first ``skip_steps`` left out."""
        c = self.per_step
        orders = np.stack([self._lane_order(l, epoch) for l in self.mine])  # (lanes, length)
        batches = []
        for t in range(skip_steps, self.steps):
            batches.append(np.sort(orders[:, t * c:(t + 1) * c].reshape(-1)))
        return batches
