"""Held-out evaluation (a pass: train/held_out.py): when to evaluate, the best weights so far,
early stopping on the task's primary metric, and ``train.target`` (train/target.py)."""
from __future__ import annotations

from typing import Dict, Optional

import torch

from fastpipe.config import TrainConfig
from fastpipe.data.held_out_batches import KeptBatches
from fastpipe.measure.clock import RunClock
from fastpipe.train.held_out import Sums, evaluate, held_out_sums
from fastpipe.train.target import OutOfReach, Target


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
            resumed.get("target"), cfg.target_screen_risk)

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
        hit = None  # the sums of a screen that reached the target: its confirmation adds them up
        if screened and self.target is not None and self.screen is not None:
            until = self._out_of_reach()
            hit = held_out_sums(self.screen, self.counted_model, until=until)
            value = None if hit is None else hit.metrics(self.g.task).get(primary)
            self.scalars[f"val_subset/{primary}"] = value
            if not self.target.note(step, self.samples(step), value, subset=True,
                                    evaluated=until and until.stopped_at):
                return None  # short of the target on the subset: nothing that counts
        limit = self.cfg.eval_batches
        self._evaluate(limit, hit)
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
        """What ends a screen early once its outcome is settled as a miss: only where its batches are
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

    @property
    def counted_model(self) -> torch.nn.Module:
        """The module whose metrics count: the EMA's average when there is one, else the model."""
        return self.ema.module if self.ema is not None else self.g.model

    def _evaluate(self, limit: Optional[int], hit: Optional[Sums] = None) -> None:
        """The raw weights' metrics, and the EMA's (the ones that count) when there is one. A
        confirmation (``hit``: the sums of the subset that just reached the target, with these
        weights) evaluates the rest of the split alone where it is kept apart (``target_rest``)."""
        rest = getattr(self.g, "target_rest", None)
        if hit is not None and rest is not None and limit is None:
            others = held_out_sums(rest, self.counted_model)
            self.latest = (hit + others if others is not None else hit).metrics(self.g.task)
            self.raw = evaluate(self.held, self.g.model) if self.ema is not None else self.latest
            return
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
