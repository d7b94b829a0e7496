"""A target's screen evaluates its samples worst first: by each sample's primary metric at the last
screen that evaluated it (the task's optional ``per_sample``), so that a screen that misses the
target is out of its reach (train/target.py ``OutOfReach``) after fewer samples. Near the target, the
samples a model got wrong some steps before are mostly the ones it still gets wrong. A screen's
outcome is its sums over all its samples, whatever their order: the order changes how soon a miss
is known, never a hit, a miss or the reached step."""
from __future__ import annotations

import math
from typing import Iterator, Optional

import torch

from fastpipe.data.batches import batch_first, tensors
from fastpipe.data.kept import KeptBatches
from fastpipe.errors import ProjectError


class WorstFirst:
    """The order of one screen's kept samples across its screens: the worst first (the lowest where
    higher is better), then the others by their last value; a sample never evaluated counts as the
    worst, ties keep the kept order. Kept batches that cannot be regrouped (``KeptBatches.regroupable``)
    are given as they are."""

    def __init__(self, task) -> None:
        self.per_sample = task.per_sample
        self.sign = -1.0 if task.higher_is_better else 1.0  # the key: larger is worse
        self.worse: Optional[torch.Tensor] = None  # each kept sample's key at its last evaluation
        self.at: Optional[torch.Tensor] = None  # the positions of the batch given last

    def batches(self, kept: KeptBatches) -> Iterator:
        """One screen's batches, the samples worst first; ``note`` each one's outputs after its forward."""
        self.at = None
        if not kept.regroupable():
            yield from kept
            return
        device = next(tensors(kept.joined)).device
        if self.worse is None or self.worse.numel() != kept.samples:
            self.worse = torch.full((kept.samples,), math.inf, device=device)
            order = None  # nothing known yet: the kept order, the kept batches themselves
        else:
            order = torch.sort(self.worse, descending=True, stable=True).indices
        positions = torch.arange(kept.samples, device=device) if order is None else order
        start = 0
        for size, batch in zip(kept.sizes, kept.in_order(order)):
            self.at = positions[start:start + size]
            start += size
            yield batch
        self.at = None

    def note(self, outputs, targets) -> None:
        """Keep the primary metric of each sample of the batch given last (no host sync)."""
        if self.at is None:
            return
        values = self.per_sample(outputs, targets)
        problem = per_sample_problem(values, len(self.at))
        if problem:
            raise ProjectError(f"the task's {problem}")
        self.worse[self.at] = self.sign * values.detach().to(self.worse.dtype)


def per_sample_problem(values, samples: int, where: str = "a batch") -> Optional[str]:
    """What is wrong with a task's ``per_sample()`` result for ``where``, of ``samples`` (None: nothing)."""
    if isinstance(values, torch.Tensor) and values.dim() == 1 and batch_first(values, samples):
        return None
    shape = list(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__
    return (f"per_sample(output, target) gives {shape} for {where} of {samples} samples; return each sample's "
            "primary metric, a tensor [N] (docs/project.md), or drop per_sample")
