"""data=default's num_workers=auto: no worker processes for samples this process reads faster than workers pay."""
from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset, TensorDataset

from conftest import cpu_runtime, make_settings
from fastpipe.data.default import build_default_loader
from fastpipe.data.splits import DataSplits, hash_split


class SlowRows(Dataset):
    """Rows a dataset computes: 0.2 ms each, as decoding a small image takes."""

    def __len__(self):
        return 400

    def __getitem__(self, i):
        time.sleep(2e-4)
        return torch.full((4,), float(i)), i % 2


def loader(dataset, *overrides):
    train, val = hash_split(dataset, 0.2)
    data = make_settings(["runtime.progress=false", *overrides]).data
    return build_default_loader(data, DataSplits("rows", train, val), cpu_runtime(), 16, 0, train=True,
                                channels_last=False)


def test_auto_takes_no_workers_for_in_memory_rows_and_workers_for_costly_samples():
    rows = TensorDataset(torch.randn(4000, 10), torch.randn(4000, 1))
    cheap = loader(rows)
    assert cheap.loader.num_workers == 0 and "num_workers=0 (auto: " in cheap.describe(), cheap.describe()
    assert loader(SlowRows()).loader.num_workers >= 1
    assert loader(rows, "data.num_workers=1").loader.num_workers == 1  # a number is taken as given


class StallsOnce(Dataset):
    """In-memory rows, but the process is not scheduled for 40 ms while it reads one (a busy machine)."""

    def __init__(self):
        self.rows = torch.randn(4000, 4)

    def __len__(self):
        return 4000

    def __getitem__(self, i):
        if i == 3:
            time.sleep(0.04)
        return self.rows[i], i % 2


def test_a_moment_the_machine_was_busy_does_not_flip_auto_and_the_reason_is_always_said():
    """It chose 2 workers in one run and 0 in the next on the same data, the first time saying nothing."""
    stalled = loader(StallsOnce())
    assert stalled.loader.num_workers == 0 and "num_workers=0 (auto: " in stalled.describe()
    costly = loader(SlowRows())
    assert costly.loader.num_workers >= 1 and f"num_workers={costly.loader.num_workers} (auto: " in costly.describe()
    assert " us a sample, read here)" in costly.describe()
