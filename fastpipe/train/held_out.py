"""What an evaluation reads: the held-out loader at ``train.eval_batch_size``, the target's screening
subset of ``train.target_eval_samples`` samples (data/subset.py), both kept on the device once read
(data/kept.py) and read ahead while training runs (``train.eval_read_ahead``), and ``HeldOut``, the
parts evaluating a model takes (train/evaluation.py runs it)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from fastpipe.config import Config, LoaderConfig, TrainConfig
from fastpipe.data import build_loader
from fastpipe.data.device import DeviceLoader
from fastpipe.data.kept import KeptBatches
from fastpipe.data.splits import DataSplits
from fastpipe.data.streams import is_stream
from fastpipe.data.subset import eval_subset
from fastpipe.errors import ConfigError
from fastpipe.protocols import Loader
from fastpipe.runtime import Dist, Runtime
from fastpipe.stages.folding import EvalForwards
from fastpipe.stages.precision import Precision
from fastpipe.stages.tasks import Task


@dataclass(frozen=True)
class HeldOut:
    """What evaluating a model takes: the held-out loader, the task's metrics, the precision's
    autocast, and the processes whose sums are added up."""

    loader: Optional[Loader]
    task: Task
    precision: Precision
    device: torch.device
    dist: Dist = Dist()
    lockstep: bool = False  # a sharded model: every rank runs each forward, also past its last batch
    forwards: Optional[EvalForwards] = None  # train.eval_fold: what an evaluation calls for each model


def eval_batch_size(train: TrainConfig) -> int:
    """``train.eval_batch_size`` per process: a number as given; auto = the training batch. An
    evaluation at the training step's shapes reuses what the step already paid for: cuDNN's autotuned
    convolutions (a new batch shape autotunes every convolution again, seconds on a GPU at a run's
    first evaluation) and the memory the step showed to fit."""
    if train.eval_batch_size != "auto":
        return int(train.eval_batch_size)
    return train.batch_size  # an unresolved train.batch_size=auto is passed on as it is


def held_out_loaders(settings: Config, splits: DataSplits, runtime: Runtime, loader_cfg: LoaderConfig,
                     channels_last: bool) -> tuple:
    """(the held-out loader, the target's screening loader or None) at ``train.eval_batch_size``: the
    screen reads ``train.target_eval_samples`` of the held-out split, class-balanced where the dataset
    exposes its labels (data/subset.py), the same samples at every evaluation, its batches kept after
    the first screen where the device has room (data/kept.py); the whole split's batches too, unless
    it is a stream."""
    train = settings.train
    args = (loader_cfg, splits, runtime, eval_batch_size(train), settings.seed)
    loader = build_loader(*args, train=False, channels_last=channels_last)
    if loader is not None and not is_stream(splits.val):  # a stream's passes need not be the same
        loader = KeptBatches(loader)
    if train.target_eval_samples is None or loader is None:
        return loader, None
    held = None if is_stream(splits.val) else len(splits.val)
    if held is not None and train.target_eval_samples >= held:
        raise ConfigError(f"train.target_eval_samples={train.target_eval_samples} is not fewer than the "
                          f"{held} held-out samples of dataset={splits.name}: screening on them would evaluate the "
                          f"whole split twice; lower it below {held}, or drop it (every evaluation is then whole)")
    # a stream has no positions to choose: build_loader refuses the subset in its own words
    subset = () if held is None else eval_subset(splits.val, train.target_eval_samples, settings.seed)
    return loader, KeptBatches(build_loader(*args, train=False, channels_last=channels_last, subset=subset))


def reads_ahead(setting, held: Optional[HeldOut]) -> bool:
    """``train.eval_read_ahead`` for ``held``: auto = on CUDA for a loader fastpipe prepares on the device
    (data=default, data=mmap; a DALI pipeline is read in the thread that built it), true = any kept loader."""
    loader = held.loader if held is not None else None
    if not isinstance(loader, KeptBatches) or setting is False:
        return False
    return setting is True or (held.device.type == "cuda" and isinstance(loader.loader, DeviceLoader))


def read_ahead(setting, *held: Optional[HeldOut]) -> None:
    """Start reading each of ``held`` (the screen's subset first) into memory in the background, where
    ``reads_ahead``: called once the run's first step has run, so that the memory it reserved is known
    (a batch is kept only while twice its bytes are free beside it)."""
    for h in held:
        if reads_ahead(setting, h):
            h.loader.read_ahead(h.device)
