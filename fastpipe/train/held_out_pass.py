"""One pass of a model over held-out batches: the task's metric sums (``Sums``, which add up over the
parts of a split evaluated with the same weights) and the metrics they give (``evaluate``)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import torch

from fastpipe.data.batches import batch_first, filled_up, head
from fastpipe.data.held_out_batches import batch_length
from fastpipe.runtime import autotuning_off
from fastpipe.train.held_out import HeldOut

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
