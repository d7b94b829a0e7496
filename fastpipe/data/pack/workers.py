"""A JPEG pack's batches decoded in worker processes (data.decoder=cpu with data.decode_workers > 0).

Each worker opens the pack itself (nothing large is pickled, whatever the start method), gathers a
whole batch's JPEG files and decodes them one after another with libjpeg-turbo (torchvision); the
training process receives the uint8 batches through shared memory and pins them
(torch.utils.data.DataLoader: its workers, its pinning thread, its error reporting). Unlike decoding
threads inside the training process, the workers share no interpreter lock with the loop that
launches the training step's kernels. With data.decode_affinity they run beside the first
TRAINING_CORES physical cores of each local rank, not on them (docs/data.md says what was measured).
"""
from __future__ import annotations

import multiprocessing
import os
from functools import partial
from pathlib import Path
from typing import Iterator, List, Optional

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from fastpipe.config.data import TRAINING_CORES
from fastpipe.data.pack.jpeg import Decoder
from fastpipe.data.pack.shards import PackSet, pack_version
from fastpipe.data.pack.source import PackImages
from fastpipe.errors import DataError, EnvironmentProblem
from fastpipe.machine import cpu_list_text, cpus_beyond

SHM = Path("/dev/shm")  # where torch's workers hand their batches over (Linux)


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
    """``dataset[sorted positions]`` -> (uint8 N x 3 x H x W, int64 labels), decoded in the calling process
    from the pack the training process opened (``identity``: a pack replaced since is refused)."""

    def __init__(self, path: Path, shape, identity: tuple) -> None:
        self.path, self.shape, self.identity = path, tuple(shape), identity
        self._images = None  # opened in each worker on first use

    def __getstate__(self):
        return {**self.__dict__, "_images": None}

    def __getitem__(self, idx: np.ndarray):
        if self._images is None:
            if pack_version(self.path) != self.identity:
                raise DataError(f"pack {self.path} was replaced after this run opened it; run again (nothing "
                                "should write a pack that a run reads)")
            decoder = Decoder("cpu", torch.device("cpu"), self.shape, threads=1, pin=False)
            self._images = PackImages(PackSet(self.path), decoder)  # verified already, by the training process
        return self._images.read_batch(idx)


class DecodingWorkers:
    """``iterate(batches)``: the batches of one epoch, in order, decoded by ``workers`` processes that
    stay up across epochs; ``prefetch`` batches (at least one a worker) decoded ahead."""

    def __init__(self, packs: PackSet, workers: int, batch_size: int, prefetch: int, pin: bool,
                 seed: int, affinity: bool, dist) -> None:
        self.workers, self._order = workers, _EpochBatches()
        self.cpus = cpus_beyond(TRAINING_CORES * dist.local_world_size, dist.local_world_size,
                                dist.local_rank) if affinity else None
        ahead = max(1, -(-prefetch // workers))
        _check_shared_memory(workers * ahead + 2, batch_size * 3 * packs.stored[0] * packs.stored[1])
        # The training process is itself spawned, so its default start method is spawn, which re-imports
        # torch and fastpipe in every worker. The workers never touch CUDA: fork is safe.
        context = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
        self.loader = DataLoader(_DecodedBatches(packs.path, packs.stored, pack_version(packs.path)), batch_size=None,
                                 sampler=self._order, num_workers=workers, prefetch_factor=ahead,
                                 persistent_workers=True, pin_memory=pin, multiprocessing_context=context,
                                 generator=torch.Generator().manual_seed(seed),  # not the global RNG's draws
                                 worker_init_fn=partial(_bind, self.cpus) if self.cpus else None)

    def describe(self) -> str:
        where = f" on CPUs {cpu_list_text(self.cpus)}" if self.cpus else ""
        return f"decoder=cpu ({self.workers} worker process{'es' if self.workers != 1 else ''}{where})"

    def iterate(self, batches: List[np.ndarray]) -> Iterator[tuple]:
        self._order.batches = list(batches)
        return iter(self.loader)


def _check_shared_memory(batches: int, batch_bytes: int) -> None:
    """Refuse in one line what would end in a worker's bus error: batches in flight that /dev/shm (a
    container's is 64 MB unless told otherwise) cannot hold."""
    try:
        st = os.statvfs(SHM)
    except OSError:
        return  # no /dev/shm: torch shares through files elsewhere
    need, size = batches * batch_bytes, st.f_blocks * st.f_frsize
    if need > size:
        raise EnvironmentProblem(f"data.decode_workers keeps about {need / 2**20:,.0f} MB of decoded batches in "
                                 f"{SHM}, which holds {size / 2**20:,.0f} MB: give the container more (docker run "
                                 "--shm-size), or lower data.prefetch or data.decode_workers (0: threads, no "
                                 "shared memory)")
