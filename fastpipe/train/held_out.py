"""What an evaluation reads: the held-out loader at ``train.eval_batch_size``, the target's screening
subset of ``train.target_eval_samples`` samples (data/subset.py), both kept on the device once read
(data/kept.py) and read ahead while training runs (``train.eval_read_ahead``), and ``HeldOut``, the
parts evaluating a model takes (train/evaluation.py runs it)."""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from fastpipe.config import Config, LoaderConfig, TrainConfig
from fastpipe.data import build_loader
from fastpipe.data.device import DeviceLoader
from fastpipe.data.held_out_batches import KeptBatches, read_ahead as kept_read_ahead, stop_reading
from fastpipe.data.splits import DataSplits
from fastpipe.data.streams import is_stream
from fastpipe.data.subset import eval_subset
from fastpipe.errors import ConfigError
from fastpipe.protocols import Loader
from fastpipe.runtime import Dist, Runtime
from fastpipe.stages.eval_forward import EvalForwards
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
    """(the held-out loader, the target's screening loader, the rest of the split) at
    ``train.eval_batch_size``; the last two None without ``train.target_eval_samples``. The screen reads
    that many samples of the held-out split, class-balanced where the dataset exposes its labels
    (data/subset.py), the same samples at every evaluation, its batches kept after the first screen
    where the device has room (data/kept.py). Where the whole split's batches are kept too
    (``keeps_whole_split``), the held-out loader is the screen's samples and then the rest's
    (``SplitInParts``): each sample kept once, and a confirmation adds the screen's sums to a pass over
    the rest alone (train/evaluation.py); the rest is None otherwise."""
    train = settings.train
    args = (loader_cfg, splits, runtime, eval_batch_size(train), settings.seed)
    whole = build_loader(*args, train=False, channels_last=channels_last)
    kept = whole is not None and keeps_whole_split(train, loader_cfg, splits)
    if train.target_eval_samples is None or whole is None:
        return (KeptBatches(whole) if kept else whole), None, None
    held = None if is_stream(splits.val) else len(splits.val)
    if held is not None and train.target_eval_samples >= held:
        raise ConfigError(f"train.target_eval_samples={train.target_eval_samples} is not fewer than the "
                          f"{held} held-out samples of dataset={splits.name}: screening on them would evaluate the "
                          f"whole split twice; lower it below {held}, or drop it (every evaluation is then whole)")
    # a stream has no positions to choose: build_loader refuses the subset in its own words
    subset = () if held is None else eval_subset(splits.val, train.target_eval_samples, settings.seed)
    screen = KeptBatches(build_loader(*args, train=False, channels_last=channels_last, subset=subset))
    if not kept:
        return whole, screen, None
    rest = KeptBatches(build_loader(*args, train=False, channels_last=channels_last,
                                    subset=np.setdiff1d(np.arange(held), subset)))
    return SplitInParts(screen, rest), screen, rest


class SplitInParts:
    """The held-out split read as its parts, one after the other (the screen's samples, then the
    rest): a pass gives every sample once, as the split's own loader would, in another order."""

    def __init__(self, *parts) -> None:
        self.parts = parts

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts)

    def __iter__(self):
        for part in self.parts:
            yield from part


def parts_of(held: Optional[HeldOut]) -> list:
    """``held`` as the HeldOut of each part it reads (itself, unless its loader is a SplitInParts)."""
    if held is None:
        return []
    if isinstance(held.loader, SplitInParts):
        return [dataclasses.replace(held, loader=part) for part in held.loader.parts]
    return [held]


def keeps_whole_split(train: TrainConfig, loader_cfg: LoaderConfig, splits: DataSplits) -> bool:
    """Whether the whole split's batches are kept: not for a stream (its passes need not give the same
    samples), nor with train.eval_batches (its evaluations read the first batches only), nor under
    data.resize_schedule (the step's memory grows after the first step, when the room is judged)."""
    return not (is_stream(splits.val) or train.eval_batches or getattr(loader_cfg, "resize_schedule", None))


def reads_ahead(setting, held: Optional[HeldOut]) -> bool:
    """Whether ``held``'s batches are read ahead per ``train.eval_read_ahead`` (config/train.py says
    what each value does); a split read in parts, where any part is."""
    loader = held.loader if held is not None else None
    if isinstance(loader, SplitInParts):
        return any(reads_ahead(setting, part) for part in parts_of(held))
    if not isinstance(loader, KeptBatches) or setting is False:
        return False
    device_loader = loader.loader
    return setting is True or (held.device.type == "cuda" and isinstance(device_loader, DeviceLoader)
                               and not getattr(device_loader.loader, "thread_bound", False))


def read_ahead(setting, *held: Optional[HeldOut]) -> None:
    """Read each of ``held`` (each part of a split read in parts, once) that ``reads_ahead`` into
    memory in one background thread, in the order given (the screen's subset first: the first
    evaluation needs it): called once the run's first step has run, so that the memory the step
    reserved is known."""
    chosen = list({id(h.loader): h for h in _parts(held) if reads_ahead(setting, h)}.values())
    if chosen:
        kept_read_ahead([h.loader for h in chosen], chosen[0].device)


def _parts(held) -> list:
    return [part for h in held for part in parts_of(h)]


@contextlib.contextmanager
def reads_end_with_the_run(*held: Optional[HeldOut]):
    """On leaving (the run ended: its target, its last step, an error or a stop signal), end a read
    ahead of ``held`` (or of its parts) still under way."""
    try:
        yield
    finally:
        stop_reading(*(h.loader for h in _parts(held)))
