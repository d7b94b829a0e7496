"""train.target_eval_samples' subset (data/held_out_batches.py): class-balanced where a dataset exposes its labels,
seeded random otherwise, the same for the same seed, in a seeded random order."""
from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Subset, TensorDataset

from fastpipe.data.held_out_batches import eval_subset, labels_of


class Labelled(torch.utils.data.Dataset):
    """A dataset sorted by label that exposes its labels as torchvision's ImageFolder does."""

    def __init__(self, labels, method: bool = False) -> None:
        self._labels = list(labels)
        self.targets = (lambda: self._labels) if method else self._labels

    def __len__(self) -> int:
        return len(self._labels)

    def __getitem__(self, i):
        return torch.zeros(1), self._labels[i]


def test_a_small_class_gives_all_it_has_and_the_others_share_the_rest():
    data = Labelled([0] * 2 + [1] * 50 + [2] * 50)
    subset = eval_subset(data, 20, seed=3)
    counts = np.bincount(np.asarray(data.targets)[subset]).tolist()
    assert counts == [2, 9, 9] and len(set(subset.tolist())) == 20


def test_the_subset_is_read_in_a_seeded_random_order_so_its_first_samples_are_a_random_draw():
    """A split listed class by class (as an image folder's is): the subset's first samples are not its
    first class's, and the order is the seed's."""
    data = Labelled([c for c in range(10) for _ in range(100)])
    subset = eval_subset(data, 200, seed=0)
    first = np.asarray(data.targets)[subset[:40]]
    assert list(subset) != sorted(subset) and len(set(first.tolist())) >= 6, first
    assert np.array_equal(subset, eval_subset(data, 200, seed=0))  # the same order at every evaluation


def test_labels_come_through_a_subset_and_from_a_targets_method():
    base = Labelled([0, 1, 2, 0, 1, 2], method=True)
    assert labels_of(Subset(base, [5, 0, 4])).tolist() == [2, 0, 1]
    picked = eval_subset(Subset(base, [0, 1, 2, 3, 4, 5]), 3, seed=0)
    assert sorted(labels_of(base)[picked].tolist()) == [0, 1, 2]


def test_without_integer_labels_the_subset_is_seeded_random():
    data = TensorDataset(torch.zeros(100, 2), torch.rand(100))  # regression targets: no classes
    assert labels_of(data) is None
    a, b = eval_subset(data, 10, seed=0), eval_subset(data, 10, seed=0)
    assert np.array_equal(a, b) and not np.array_equal(a, eval_subset(data, 10, seed=1)) and len(set(a)) == 10
    assert not np.array_equal(a, np.arange(10))  # not the first samples
