"""A JPEG pack's batches decoded in worker processes (data.decoder=cpu with data.decode_workers > 0).

Each worker opens the pack itself (nothing large is pickled, whatever the start method), gathers a
whole batch's JPEG files and decodes them one after another with libjpeg-turbo (torchvision); the
training process only receives the uint8 batches through shared memory and pins them
(torch.utils.data.DataLoader: its workers, its pinning thread, its error reporting). Unlike decoding
threads inside the training process, the workers share no interpreter lock with the loop that
launches the training step's kernels. With data.decode_affinity the workers also keep off the first
TRAINING_CORES physical cores (SMT siblings included), which the training process's launching threads
then have to themselves: a compiled step at batch 256 spends most of its GPU time launching kernels
from the host, so a core shared with a decoder slows the step itself.
"""
from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Iterator, List, Optional, Set

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler


TRAINING_CORES = 4  # physical cores left to the training process by data.decode_affinity


def _siblings(cpu: int) -> Set[int]:
    """``cpu`` and its SMT siblings (one physical core), as Linux lists them."""
    try:
        text = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip()
    except OSError:
        return {cpu}
    out = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out


def worker_cpus(keep: int = TRAINING_CORES) -> Optional[List[int]]:
    """The CPUs this process may use less its first ``keep`` physical cores; None where CPU affinity is
    not available or nothing would be left."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    kept: Set[int] = set()
    cores = 0
    for cpu in allowed:
        if cpu in kept:
            continue
        if cores == keep:
            break
        kept |= _siblings(cpu) & set(allowed)
        cores += 1
    rest = [cpu for cpu in allowed if cpu not in kept]
    return rest or None


def _bind(cpus: List[int], worker_id: int) -> None:
    os.sched_setaffinity(0, cpus)


class _EpochBatches(Sampler):
    """The index batches of the epoch being read, set before each epoch."""

    def __init__(self) -> None:
        self.batches: List[np.ndarray] = []

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class _DecodedBatches(Dataset):
    """``dataset[sorted positions]`` -> (uint8 N x 3 x H x W, int64 labels), decoded in the calling process."""

    def __init__(self, path: Path, shape) -> None:
        self.path, self.shape = path, tuple(shape)
        self._images = None  # opened in each worker on first use

    def __getstate__(self):
        return {"path": self.path, "shape": self.shape, "_images": None}

    def __getitem__(self, idx: np.ndarray):
        if self._images is None:
            from fastpipe.data.pack.jpeg import Decoder
            from fastpipe.data.pack.shards import PackSet
            from fastpipe.data.pack.source import PackImages

            torch.set_num_threads(1)  # one core a worker: the decode is serial, the batches run in parallel
            decoder = Decoder("cpu", torch.device("cpu"), self.shape, threads=1, pin=False)
            self._images = PackImages(PackSet(self.path), decoder)  # verified already, by the training process
        return self._images.read_batch(idx)


class DecodingWorkers:
    """``iterate(batches)``: the batches of one epoch, in order, decoded by ``workers`` processes that
    stay up across epochs; about ``prefetch`` batches (at least one a worker) decoded ahead."""

    def __init__(self, path: Path, shape, workers: int, prefetch: int, pin: bool,
                 device: Optional[torch.device] = None, affinity: bool = False) -> None:
        self.workers, self._order = workers, _EpochBatches()
        self.cpus = worker_cpus() if affinity else None
        pin_device = str(device) if pin and device is not None and device.type == "cuda" else ""
        self.loader = DataLoader(_DecodedBatches(Path(path), shape), batch_size=None, sampler=self._order,
                                 num_workers=workers, prefetch_factor=max(1, -(-prefetch // workers)),
                                 persistent_workers=True, pin_memory=pin, pin_memory_device=pin_device,
                                 worker_init_fn=partial(_bind, self.cpus) if self.cpus else None)

    def describe(self) -> str:
        where = f" on CPUs {_span(self.cpus)}" if self.cpus else ""
        return f"decoder=cpu ({self.workers} worker process{'es' if self.workers != 1 else ''}{where})"

    def iterate(self, batches: List[np.ndarray]) -> Iterator[tuple]:
        self._order.batches = list(batches)
        return iter(self.loader)


def _span(cpus: List[int]) -> str:
    """[4, 5, 6, 7, 12, 13] -> '4-7,12-13'."""
    runs, start = [], cpus[0]
    for a, b in zip(cpus, cpus[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start}-{a}" if a != start else str(a))
            start = b
    return ",".join(runs)
