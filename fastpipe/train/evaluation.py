"""Held-out evaluation: the task's metrics over the split, when to evaluate, the best weights so far,
early stopping on the task's primary metric, and ``train.target`` (train/target.py)."""
from __future__ import annotations

import contextlib
import itertools
from typing import Callable, Dict, Optional

import torch

from fastpipe.config import TrainConfig
from fastpipe.data.kept import KeptBatches, batch_length
from fastpipe.measure.clock import RunClock
from fastpipe.runtime import autotuning_off
from fastpipe.train.held_out import HeldOut
from fastpipe.train.target import OutOfReach, Target


@torch.no_grad()
def evaluate(held: HeldOut, model: torch.nn.Module, limit: Optional[int] = None,
             until: Optional[Callable[[Dict[str, torch.Tensor], int], bool]] = None) -> Optional[Dict[str, float]]:
    """The task's held-out metrics of ``model``: per-batch sums kept on the device, summed over the
    split (its first ``limit`` batches, when given: train.eval_batches) and the ranks in one all-reduce,
    divided by the number of held-out samples; then ``summarize``. ``until(sums so far, samples so
    far)``, called after each batch, ends the pass early when True (a screen whose outcome is settled:
    train/target.py ``OutOfReach``); the metrics are then those of the samples evaluated. Images are
    evaluated at the size the loader gives (the dataset's), whatever size a resize schedule trained at last."""
    if held.loader is None:
        return None
    was_training = model.training
    model.eval()
    forward = held.forwards(model) if held.forwards is not None else model  # train.eval_fold
    names, totals, count, device, full = None, None, 0, held.device, None
    batches = iter(held.loader) if limit is None else itertools.islice(iter(held.loader), limit)
    for (inputs, targets), counted in (in_lockstep(held, batches) if held.lockstep
                                       else ((batch, True) for batch in batches)):
        size = batch_length(targets)
        full = full or size
        # the split's last, smaller batch is a shape met once per evaluation: cuDNN would autotune every
        # convolution for it (seconds on a GPU) to run it a single time
        with (autotuning_off() if size < full else contextlib.nullcontext()), held.precision.autocast():
            outputs = forward(inputs)
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
    means = {n: v / totals[-1] for n, v in zip(names, totals)}
    summarize = getattr(held.task, "summarize", None)
    return {**means, **(summarize(means) if callable(summarize) else {})}


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


def epoch_ends_screened(cfg: TrainConfig) -> bool:
    """Whether a target's subset screens an epoch's end as it does an every-``eval_every`` evaluation
    (the whole split only on a hit): yes, unless early stopping counts whole-split evaluations. The
    run's last evaluation is whole either way."""
    return cfg.early_stop_patience is None


class Evaluator:
    """Evaluates at each epoch's end and every ``train.eval_every`` steps; keeps the best weights by the
    task's primary metric (``checkpoints/best.pt``, never rotated) and counts evaluations without
    improvement for ``train.early_stop_patience``. With an EMA, the average's weights are the ones
    that count; the raw weights' metrics are kept beside them. With ``train.target`` each evaluation
    is checked against it (``target``); its time is the ``eval`` part of the run's clock."""

    def __init__(self, g, cfg: TrainConfig, ckpt, ema=None, resumed: Optional[dict] = None,
                 clock: Optional[RunClock] = None, samples=lambda step: 0) -> None:
        self.g, self.cfg, self.ckpt, self.ema = g, cfg, ckpt, ema
        self.held, self.screen = g.held_out, getattr(g, "target_held_out", None)
        self.clock, self.samples = clock or RunClock(), samples  # samples(step): trained on by then, all ranks
        self.latest: Optional[Dict[str, float]] = None
        self.raw: Optional[Dict[str, float]] = None
        self.scalars: Dict[str, float] = {}  # the last evaluation's, for TensorBoard
        resumed = resumed or {}  # a checkpoint's state(): best.pt is replaced only by a better result
        self.best: Optional[dict] = resumed.get("best")  # {"step", "value", "metrics"}
        self.since_best = int(resumed.get("since_best", 0))
        self.history = []
        self.evaluated_at: Optional[int] = resumed.get("step")  # the last whole-split evaluation's step
        self.clock.resume(resumed.get("clock"))
        target = getattr(cfg, "target", None)
        self.target = None if target is None else Target(
            target, g.task.primary, g.task.higher_is_better, self.clock, cfg.eval_every, cfg.target_eval_samples,
            resumed.get("target"))

    def state(self) -> Optional[dict]:
        """What a checkpoint keeps of this Evaluator (Position.evaluation), the run's clock with it."""
        state = {"clock": self.clock.state(), "step": self.evaluated_at}
        if self.best is not None:
            state.update(best=self.best, since_best=self.since_best)
        if self.target is not None:
            state["target"] = self.target.state()
        return state

    def outcome(self, step: int, samples: int) -> dict:
        """What a run's record keeps of its evaluations at ``step`` (``samples`` trained on by then): the
        best by the primary metric (step, value) and the target's record."""
        return {"best": self.best and {"step": self.best["step"], "value": self.best["value"]},
                "target": self.target and self.target.record(step, samples)}

    @property
    def screens_epoch_end(self) -> bool:
        """A target's subset screens this run's epoch ends (``epoch_ends_screened``)."""
        return self.target is not None and self.screen is not None and epoch_ends_screened(self.cfg)

    def due(self, step: int) -> bool:
        return bool(self.cfg.eval_every) and step % self.cfg.eval_every == 0

    @property
    def weights(self) -> str:
        return "ema" if self.ema is not None else "raw"

    def run(self, step: int, screened: bool = False) -> Optional[Dict[str, float]]:
        """Evaluate now (``screened``: a target's subset may screen it: every evaluation but the run's
        last, ``screens_epoch_end``); returns the metrics that count (the EMA's when there is one), None
        when none did."""
        with self.clock.part("eval"):
            return self._run(step, screened)

    def _run(self, step: int, screened: bool) -> Optional[Dict[str, float]]:
        primary = self.g.task.primary
        self.scalars = {}
        if screened and self.target is not None and self.screen is not None:
            until = self._out_of_reach()
            screened = evaluate(self.screen, self.ema.module if self.ema is not None else self.g.model, until=until)
            value = (screened or {}).get(primary)
            self.scalars[f"val_subset/{primary}"] = value
            if not self.target.note(step, self.samples(step), value, subset=True,
                                    evaluated=until and until.stopped_at):
                return None  # short of the target on the subset: nothing that counts
        limit = self.cfg.eval_batches
        self._evaluate(limit)
        if self.latest is not None and limit is not None and self.target is not None:
            # the first eval_batches batches screen as a subset does: a hit is confirmed on the whole split
            value = self.latest.get(primary)
            self.scalars[f"val_subset/{primary}"] = value
            if self.target.note(step, self.samples(step), value, subset=True):
                limit = None
                self._evaluate(None)
        if self.latest is not None:
            self.history.append({"step": step, **self.latest})
            self.evaluated_at = step
            if self.target is not None and limit is None:  # only a whole-split evaluation can reach the target
                self.target.note(step, self.samples(step), self.latest.get(primary))
            self._track_best(step)
        self.scalars.update({f"val/{k}": v for k, v in (self.latest or {}).items()})
        self.scalars.update({f"val_raw/{k}": v for k, v in (self.raw or {}).items() if self.ema is not None})
        return self.latest

    def _out_of_reach(self) -> Optional[OutOfReach]:
        """What ends a screen early once the target is out of its reach: only where its batches are
        kept (their number of samples known; a first pass is read whole, to keep it), in one process
        (the sums of other ranks are unknown mid-pass), for a task that bounds its metric and has no
        ``summarize`` (which may derive the primary metric from the sums otherwise)."""
        task, loader = self.g.task, self.screen.loader
        bounds = getattr(task, "bounds", None)
        if (bounds is None or callable(getattr(task, "summarize", None)) or self.screen.dist.world_size > 1
                or self.screen.lockstep or not isinstance(loader, KeptBatches)):
            return None
        samples = loader.settled()  # after a read ahead under way: the same screens whatever its timing
        return None if samples is None else OutOfReach(self.target, bounds, samples)

    def _evaluate(self, limit: Optional[int]) -> None:
        """The raw weights' metrics, and the EMA's (the ones that count) when there is one."""
        self.raw = evaluate(self.held, self.g.model, limit)
        self.latest = evaluate(self.held, self.ema.module, limit) if self.ema is not None else self.raw

    def _track_best(self, step: int) -> None:
        name, higher = self.g.task.primary, self.g.task.higher_is_better
        value = self.latest.get(name)
        if value is None:
            return
        if self.best is None:
            improved = True
        else:
            gain = value - self.best["value"] if higher else self.best["value"] - value
            improved = gain > self.cfg.early_stop_min_delta
        if improved:
            self.best, self.since_best = {"step": step, "value": value, "metrics": dict(self.latest)}, 0
            self.ckpt.save_weights(self.g, "best", step, self.ema, {name: value})
        else:
            self.since_best += 1

    @property
    def stopped_early(self) -> bool:
        """Early stopping: the primary metric has not improved for ``early_stop_patience`` evaluations."""
        return self.cfg.early_stop_patience is not None and self.since_best >= self.cfg.early_stop_patience

    @property
    def stop(self) -> bool:
        """Training should end: early stopping, or the target was reached."""
        return self.stopped_early or (self.target is not None and self.target.reached is not None)

    def why_stopped(self) -> str:
        """What ended the run (``stop`` is true): ``target`` or ``early_stop``."""
        return "target" if self.target is not None and self.target.reached is not None else "early_stop"
