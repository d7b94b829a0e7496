"""Streams from WebDataset tar shards and LitData optimized folders, split by fastpipe (``set_shard``).

Both libraries split a stream between ranks and DataLoader workers on their own; here that
splitting is turned off and fastpipe's reader number decides instead (streams.py), so every reader
opens only its own share. Use them as a dataset's ``train`` / ``val``, e.g. in a project's
dataset callable (docs/data.md#streams); the packages are extras (``pip install
"fastpipe[streams]"``), imported only when a stream is iterated.

- ``TarShards(urls, epoch_length)``: WebDataset over tar shards (``nodesplitter=None,
  workersplitter=None``); reader ``index`` of ``count`` reads shards ``index, index + count, ...``
  (whole shards: give at least as many shards as readers). A sample is ``(input, target)`` from
  the ``input_key`` and ``target_key`` members (``.npy`` arrays become tensors, ``.cls`` an int).
- ``LitDataStream(input_dir)``: a ``litdata.StreamingDataset`` told that it is rank ``index`` of
  ``count`` with one worker, so LitData hands it that share of its chunks and items; a sample is
  ``(item[input_key], item[target_key])``.
"""
from __future__ import annotations

import glob
from typing import List, Sequence, Union

import numpy as np
import torch
from torch.utils.data import IterableDataset

from fastpipe.errors import DataError


def _tensor(value):
    return torch.from_numpy(np.asarray(value)) if isinstance(value, np.ndarray) else value


class TarShards(IterableDataset):
    """WebDataset tar shards, each reader reading only its own shards."""

    def __init__(self, urls: Union[str, Sequence[str]], epoch_length: int, input_key: str = "input.npy",
                 target_key: str = "cls") -> None:
        self.urls: List[str] = sorted(glob.glob(urls)) if isinstance(urls, str) else list(urls)
        if not self.urls:
            raise DataError(f"TarShards: no tar shards match {urls!r}; check the path (a glob such as "
                            "'data/train-*.tar', or a list of shard files)")
        self.epoch_length, self.input_key, self.target_key = epoch_length, input_key, target_key
        self.shard = (0, 1)

    def set_shard(self, index: int, count: int) -> None:
        self.shard = (index, count)

    def shards(self) -> List[str]:
        index, count = self.shard
        return self.urls[index::count]

    def __iter__(self):
        import webdataset as wds

        index, count = self.shard
        if count > len(self.urls):  # whole shards per reader: a reader without one would read nothing
            raise DataError(f"TarShards: {count} readers (processes x DataLoader workers) but {len(self.urls)} tar "
                            f"shard(s) ({self.urls[0]}, ...): reader {index} has none; write at least {count} shards, "
                            f"or lower data.num_workers")
        pipeline = wds.WebDataset(self.shards(), shardshuffle=False, nodesplitter=None, workersplitter=None,
                                  empty_check=False).decode()
        for sample in pipeline:
            yield _tensor(sample[self.input_key]), int(sample[self.target_key])


class LitDataStream(IterableDataset):
    """A LitData optimized folder (``litdata.optimize`` or its ``BinaryWriter``), split by fastpipe."""

    def __init__(self, input_dir: str, input_key: str = "x", target_key: str = "y", shuffle: bool = False,
                 seed: int = 42) -> None:
        self.input_dir, self.input_key, self.target_key = input_dir, input_key, target_key
        self.shuffle, self.seed, self.shard, self.epoch = shuffle, seed, (0, 1), 0
        self._length = None

    @property
    def epoch_length(self) -> int:
        if self._length is None:
            self._length = len(self._dataset())
        return self._length

    def set_shard(self, index: int, count: int) -> None:
        self.shard = (index, count)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _dataset(self):
        from litdata import StreamingDataset

        return StreamingDataset(self.input_dir, shuffle=self.shuffle, drop_last=False, seed=self.seed)

    def __iter__(self):
        from litdata.utilities.env import _DistributedEnv, _WorkerEnv

        index, count = self.shard
        dataset = self._dataset()
        dataset.set_epoch(self.epoch + 1)  # LitData counts epochs from 1
        # Turn LitData's own split off: it is rank `index` of `count`, with one worker.
        dataset.distributed_env = _DistributedEnv(world_size=count, global_rank=index, num_nodes=1)
        dataset._forced_worker_env = _WorkerEnv(world_size=1, rank=0)
        for item in dataset:
            yield _tensor(item[self.input_key]), _tensor(item[self.target_key])
