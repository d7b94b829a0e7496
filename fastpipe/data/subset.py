"""``train.target_eval_samples``: which held-out samples the target's screening evaluations read.

A dataset that exposes its labels (a ``targets`` attribute or method holding one integer class per
sample, as torchvision's ``ImageFolder`` and fastpipe's image datasets do; through a ``Subset``, the
labels of its indices) gets a class-balanced subset: every class the same share (classes with fewer
samples give all they have, the rest goes to the others), drawn within each class with the run's
seed. Any other dataset gets a seeded random subset. Either way the subset is drawn once and every
screening evaluation reads the same samples, as positions in the held-out split in a seeded random
order: a screen's first samples are then a random draw of its subset (an image folder's split is
listed class by class), which a screen's statistical early end relies on (train/target.py OutOfReach).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from torch.utils.data import Subset


def labels_of(dataset) -> Optional[np.ndarray]:
    """One integer label per sample of ``dataset``, or None when it does not expose integer labels."""
    if isinstance(dataset, Subset):
        labels = labels_of(dataset.dataset)
        return None if labels is None else labels[np.asarray(dataset.indices, dtype=np.int64)]
    targets = getattr(dataset, "targets", None)
    if callable(targets):
        targets = targets()
    if targets is None:
        return None
    try:
        labels = np.asarray(targets)
    except (TypeError, ValueError):
        return None
    if labels.ndim != 1 or len(labels) != len(dataset) or not (
            np.issubdtype(labels.dtype, np.integer) or labels.dtype == bool):
        return None  # soft or multi-label targets, regression values: no classes to balance
    return labels.astype(np.int64)


def eval_subset(dataset, samples: int, seed: int) -> np.ndarray:
    """``samples`` positions of ``dataset`` (class-balanced when it exposes labels, else random),
    drawn with ``seed``, in a random order drawn with it. All of them, in order, when ``samples`` is
    not fewer than the dataset's."""
    n = len(dataset)
    if samples >= n:
        return np.arange(n)
    rng = np.random.default_rng([seed % 2**32, 0xE7A1])  # the run's seed, a stream of its own
    labels = labels_of(dataset)
    chosen = rng.choice(n, size=samples, replace=False) if labels is None else balanced(labels, samples, rng)
    return rng.permutation(chosen)


def balanced(labels: np.ndarray, samples: int, rng: np.random.Generator) -> np.ndarray:
    """``samples`` positions with every class's count as even as the classes' sizes allow: each
    class gets an equal quota (the remainder to classes in a random order); a class smaller than its
    quota gives all it has and its shortfall is shared out again."""
    classes, counts = np.unique(labels, return_counts=True)
    quota = np.zeros(len(classes), dtype=np.int64)
    left = samples
    while left > 0:
        open_ = np.flatnonzero(quota < counts)
        share, extra = divmod(left, len(open_))
        give = np.full(len(open_), share, dtype=np.int64)
        give[rng.permutation(len(open_))[:extra]] += 1
        give = np.minimum(give, counts[open_] - quota[open_])
        quota[open_] += give
        left -= int(give.sum())
    chosen = [rng.choice(np.flatnonzero(labels == c), size=k, replace=False) for c, k in zip(classes, quota) if k]
    return np.concatenate(chosen)
