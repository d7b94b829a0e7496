"""Datasets for tests that misbehave on purpose, named by ``dataset._target_=fault_data.X``."""
from __future__ import annotations

import os
import signal

import torch
from torch.utils.data import Dataset, get_worker_info


class KillsItsWorker(Dataset):
    """64 samples of (float32[4], label); a DataLoader worker that reads one is killed by SIGKILL,
    as the out-of-memory killer would kill it."""

    num_classes = 2

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int):
        if get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.full((4,), float(index)), index % 2
