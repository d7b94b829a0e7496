"""What an evaluation reads: the held-out loader at ``train.eval_batch_size``, the target's screening
subset of ``train.target_eval_samples`` samples (data/held_out_batches.py), both kept on the device once read
(data/held_out_batches.py) and read ahead while training runs (``train.eval_read_ahead``), and ``HeldOut``, the
parts evaluating a model takes (train/evaluation.py runs it); and one pass of a model over held-out
batches: the task's metric sums (``Sums``, which add up over the parts of a split evaluated with the same
weights) and the metrics they give (``evaluate``)."""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import numpy as np
import torch

from fastpipe.config import Config, LoaderConfig, TrainConfig
from fastpipe.data import build_loader
from fastpipe.data.batches import batch_first, filled_up, head
from fastpipe.data.device import DeviceLoader
from fastpipe.data.held_out_batches import KeptBatches, batch_length, read_ahead as kept_read_ahead, stop_reading
from fastpipe.data.splits import DataSplits
from fastpipe.data.streams import is_stream
from fastpipe.data.held_out_batches import eval_subset
from fastpipe.errors import ConfigError
from fastpipe.protocols import Loader
from fastpipe.runtime import Dist, Runtime, autotuning_off
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
    (data/held_out_batches.py), the same samples at every evaluation, its batches kept after the first screen
    where the device has room (data/held_out_batches.py). Where the whole split's batches are kept too
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


# Where a split's last, shorter batch runs as it is: a new batch shape costs the CPU's kernels nothing,
# where a GPU builds new ones for it (cuDNN plans); filling it up there would only add samples to compute.
RUNS_SHORT_AS_IS = ("cpu",)


@dataclass(frozen=True)
class Sums:
    """A pass's sums of each metric over its samples (every rank's), and their number."""

    names: List[str]
    totals: List[float]
    count: int

    def __add__(self, other: "Sums") -> "Sums":
        if self.names != other.names:
            raise ValueError(f"the task's metrics differ between two passes: {self.names} against {other.names}")
        return Sums(self.names, [a + b for a, b in zip(self.totals, other.totals)], self.count + other.count)

    def metrics(self, task) -> Dict[str, float]:
        """The means, then the task's ``summarize`` of them."""
        means = {n: v / self.count for n, v in zip(self.names, self.totals)}
        summarize = getattr(task, "summarize", None)
        return {**means, **(summarize(means) if callable(summarize) else {})}


def evaluate(held: HeldOut, model: torch.nn.Module, limit: Optional[int] = None,
             until: Optional[Callable[[Dict[str, torch.Tensor], int], bool]] = None) -> Optional[Dict[str, float]]:
    """The task's held-out metrics of ``model`` (``held_out_sums``' means, then ``summarize``); None
    when no sample was evaluated."""
    sums = held_out_sums(held, model, limit, until)
    return None if sums is None else sums.metrics(held.task)


@torch.no_grad()
def held_out_sums(held: HeldOut, model: torch.nn.Module, limit: Optional[int] = None,
                  until: Optional[Callable[[Dict[str, torch.Tensor], int], bool]] = None) -> Optional[Sums]:
    """The task's metric sums of ``model``: per-batch sums kept on the device, summed over the split
    (its first ``limit`` batches, when given: train.eval_batches) and the ranks in one all-reduce.
    ``until(sums so far, samples so far)``, called after each batch, ends the pass early when True (a
    screen whose outcome is settled: train/target.py ``OutOfReach``); the sums are then those of the
    samples evaluated. Images are evaluated at the size the loader gives (the dataset's), whatever
    size a resize schedule trained at last."""
    if held.loader is None:
        return None
    was_training = model.training
    model.eval()
    forward = held.forwards(model) if held.forwards is not None else model  # train.eval_fold
    names, totals, count, device = None, None, 0, held.device
    fills = device.type not in RUNS_SHORT_AS_IS
    full, filler = None, None  # the pass's first batch's size; its inputs, where a shorter batch fills up with them
    batches = iter(held.loader) if limit is None else itertools.islice(iter(held.loader), limit)
    for (inputs, targets), counted in (in_lockstep(held, batches) if held.lockstep
                                       else ((batch, True) for batch in batches)):
        size = batch_length(targets)
        with held.precision.autocast():
            if full is None:
                outputs = forward(inputs)
                full, filler = size, (inputs if fills and batch_first(outputs, size) else None)
            else:
                outputs = _shorter_or_not(forward, inputs, size, full, filler)
            if not counted:
                continue
            sums = held.task.metrics(outputs, targets)
        if totals is None:
            names = list(sums)
            totals = torch.zeros(len(names) + 1, dtype=torch.float64, device=device)
        totals[:-1] += torch.stack([torch.as_tensor(sums[n], device=device).detach().double() for n in names])
        count += size
        if until is not None and until(dict(zip(names, totals)), count):
            break
    model.train(was_training)
    if totals is None:
        totals = torch.zeros(1, dtype=torch.float64, device=device)  # this rank had no batch
    totals[-1] = count
    totals = held.dist.all_reduce_sum(totals).tolist()
    if not totals[-1] or names is None:
        return None
    return Sums(names, totals[:-1], int(totals[-1]))


def _shorter_or_not(forward: Callable, inputs, size: int, full: int, filler):
    """The outputs of a batch after the pass's first. One shorter than the first (the split's last) is a
    shape met once per evaluation, for which a GPU builds new kernels (cuDNN plans: 0.11-0.16 s for
    ResNet-50 on an H200, benchmarks/results/eval-parts). Given ``filler`` (the first batch's inputs: off
    the CPU, ``RUNS_SHORT_AS_IS``, where the model's outputs were batch-first tensors) it is filled up to
    ``full`` samples with that batch's, and the outputs cut back to its own, where the inputs fill up
    alike: a sample's outputs do not depend on the others in its batch, as any evaluation batch size
    presumes. Else it runs as it is, cuDNN's autotuning off (seconds of it to run one batch once)."""
    if size >= full:
        return forward(inputs)
    filled = None if filler is None else filled_up(inputs, filler, full)
    if filled is not None:
        return head(forward(filled), size, copy=False)
    with autotuning_off():
        return forward(inputs)


def in_lockstep(held: HeldOut, batches):
    """(batch, counted) pairs with the same number of forwards on every rank, as a sharded model needs
    (each forward gathers parameters from all ranks): a rank out of batches repeats its last one,
    uncounted, while another still has some. One small all-reduce per batch."""
    from fastpipe.errors import ConfigError

    dist, device = held.dist, held.device
    last = next(batches, None)
    having = int(dist.all_reduce_sum(torch.tensor([float(last is not None)], device=device)).item())
    if having == 0:
        return
    if having < dist.world_size:
        raise ConfigError(f"the held-out split gives {dist.world_size - having} of {dist.world_size} ranks no batch, "
                          "and a sharded model's ranks must evaluate together: hold out more samples (or a smaller "
                          "train.batch_size)")
    yield last, True
    while True:
        batch = next(batches, None)
        if not bool(dist.any_rank(torch.tensor(batch is not None, device=device))):
            return
        if batch is None:
            yield last, False
        else:
            last = batch
            yield batch, True
