"""What a JPEG decode worker process runs (pack/workers.py starts them): parts of batches decoded
from the pack straight into the training process's ring of batch buffers."""
from __future__ import annotations

import os
import queue
import signal
from pathlib import Path
from typing import List, Optional

import numpy as np
import torch

from fastpipe.data.pack.jpeg import decode_into
from fastpipe.data.pack.shards import PackSet, pack_version
from fastpipe.data.pack.source import pack_files, undecodable
from fastpipe.errors import DataError

POLL_S = 5.0  # how often a worker looks whether its training process lives, and the training process its workers


def decode_part(packs: PackSet, idx: np.ndarray, out: torch.Tensor) -> None:
    """Images ``idx`` (sorted positions) of ``packs`` decoded into ``out`` (len(idx) x 3 x H x W)."""
    try:
        decode_into(pack_files(packs, idx), out)
    except RuntimeError as exc:
        raise undecodable(packs.path, idx, exc) from exc


def work(path: Path, identity: tuple, ring: torch.Tensor, tasks, results, cpus: Optional[List[int]],
          parent: Optional[int] = None) -> None:
    """A worker's loop: (generation, batch, slot, first row, positions) -> its rows of ``ring[slot]``, until
    told to stop (None) or its ``parent`` process is gone."""
    if parent is not None:  # Ctrl-C and a scheduler's SIGTERM reach the whole process group: the training
        for sig in (signal.SIGINT, signal.SIGTERM):  # process handles them, then stops its workers
            signal.signal(sig, signal.SIG_IGN)
    if cpus:
        os.sched_setaffinity(0, cpus)
    torch.set_num_threads(1)
    packs = None
    while True:
        try:
            task = tasks.get(timeout=POLL_S)
        except queue.Empty:
            if parent is not None and os.getppid() != parent:
                return  # the training process died without stopping its workers
            continue
        if task is None:
            return
        generation, seq, slot, start, idx = task
        try:
            if packs is None:
                if pack_version(path) != identity:
                    raise DataError(f"pack {path} was replaced after this run opened it; run again (nothing "
                                    "should write a pack that a run reads)")
                packs = PackSet(path)  # verified already, by the training process
            decode_part(packs, idx, ring[slot, start:start + len(idx)])
            results.put((generation, seq, slot, None))
        except Exception as exc:  # noqa: BLE001 - the training process raises it, in one line
            results.put((generation, seq, slot, str(exc) if isinstance(exc, DataError) else
                         f"a decode worker failed: {type(exc).__name__}: {exc}"))
