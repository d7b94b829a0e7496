"""``train.target``: when the run's primary held-out metric first reached the target (docs/time-to-target.md).

The evaluator reports every evaluation here (``note``); the first whole-split evaluation whose
primary metric reaches the target in the task's direction stops the run. An evaluation on the
``train.target_eval_samples`` subset only decides whether to confirm on the whole split at once;
its value is kept on the curve (marked ``subset``) but never counts. The record survives a resume
(``state``), so a continued run's curve and clock go on where they stopped; a resume with another
target judges the curve so far against it (a harder one not reached yet trains on).
"""
from __future__ import annotations

import math
from typing import List, Optional

from fastpipe.errors import ConfigError
from fastpipe.measure.clock import RunClock


def check_target_run(settings, dataset, task) -> None:
    """``train.target`` needs a held-out split, and a value in the range the task's metric can take."""
    from fastpipe.config import check_target

    if dataset.val is None:
        raise ConfigError(f"train.target={settings.train.target:g} is checked on the held-out split, and "
                          f"dataset={dataset.name} has none: drop train.target, or use a dataset with one")
    check_target(settings.train.target, task.primary, getattr(task, "bounds", None),
                 settings.choices.get("task") or settings.task.short_name)


class Target:
    """The target of one run and what its evaluations showed."""

    def __init__(self, value: float, metric: str, higher_is_better: bool, clock: RunClock,
                 eval_every: int, subset: Optional[int] = None, resumed: Optional[dict] = None,
                 screen_risk: float = 0.0) -> None:
        self.value, self.metric, self.higher = float(value), metric, higher_is_better
        self.clock, self.eval_every, self.subset = clock, eval_every, subset
        self.screen_risk = screen_risk  # train.target_screen_risk: OutOfReach's
        resumed = resumed or {}
        self.reached: Optional[dict] = resumed.get("reached")  # {step, seconds, samples, value}
        self.best: Optional[float] = resumed.get("best_value")
        self.curve: List[dict] = list(resumed.get("curve") or [])  # one entry per evaluation (+ its samples)
        if resumed.get("value", self.value) != self.value:  # a resume with another target: judged on the same curve
            self.reached = next(({"step": c["step"], "seconds": c["seconds"], "samples": c.get("samples"),
                                  "value": c["value"]} for c in self.curve if not c["subset"] and self.hit(c["value"])),
                                None)

    def hit(self, value: Optional[float]) -> bool:
        """True when ``value`` reaches the target in the metric's direction."""
        if value is None:
            return False
        return value >= self.value if self.higher else value <= self.value

    def note(self, step: int, samples: int, value: Optional[float], subset: bool = False,
             evaluated: Optional[int] = None) -> bool:
        """An evaluation ended now with primary metric ``value``; True when it reached the target (a
        whole-split evaluation: the run stops; a subset one: confirm on the whole split). ``evaluated``:
        the held-out samples a screen ended at, once its outcome was settled as a miss (``OutOfReach``)."""
        seconds = self.clock.elapsed()
        self.curve.append({"step": step, "seconds": seconds, "value": value, "subset": subset, "samples": samples,
                           **({"evaluated": evaluated} if evaluated else {})})
        if value is None or subset:
            return self.hit(value)
        if self.best is None or (value > self.best if self.higher else value < self.best):
            self.best = value
        if self.reached is None and self.hit(value):
            self.reached = {"step": step, "seconds": seconds, "samples": samples, "value": value}
            return True
        return False

    def state(self) -> dict:
        """What a checkpoint keeps of it (the target too: a resume with another one judges the curve again)."""
        return {"value": self.value, "reached": self.reached, "best_value": self.best, "curve": self.curve}

    def record(self, steps: int, samples: int) -> dict:
        """metrics.json's ``target``: when it was reached, or (not reached) the clock when the run ended."""
        reached = self.reached
        seconds = reached["seconds"] if reached else self.clock.elapsed()
        return {"metric": self.metric, "value": self.value, "higher_is_better": self.higher,
                "reached": reached is not None, "seconds": seconds, "seconds_end_to_end": self.clock.end_to_end(seconds),
                "steps": reached["step"] if reached else steps, "samples": reached["samples"] if reached else samples,
                "reached_value": reached["value"] if reached else None, "best_value": self.best,
                "eval_every": self.eval_every, "eval_samples": self.subset,
                "screen_risk": self.screen_risk if self.subset else None,
                "curve": [{k: v for k, v in c.items() if k != "samples"} for c in self.curve]}

    def describe_reached(self) -> str:
        """``train.target=0.8 was reached at step 12 (accuracy 0.8475)``, for a resume that has nothing to train."""
        reached = self.reached
        return (f"train.target={self.value:g} was reached at step {reached['step']} ({self.metric} "
                f"{reached['value']:.4g})")


class OutOfReach:
    """Ends a screen once its subset's outcome is settled as a miss, checked after each batch with the
    sums so far (``seen`` of its ``samples`` evaluated) by evaluate():

    - certainly: even with every remaining sample at the best the task's ``bounds`` allow, the
      subset's mean would miss the target;
    - or, with ``target.screen_risk`` > 0 and both bounds finite, beyond that risk: were the whole
      subset's mean to reach the target, a first ``seen`` of its samples (in the subset's random
      order: data/held_out_batches.py) would fall this far short of it with a probability under the risk
      shared over the screen's checks. Bernstein's inequality bounds that probability; it holds for
      samples drawn without replacement (Hoeffding 1963, section 6), with the largest variance a
      subset reaching the target can have (Bhatia-Davis: (hi - mean)(mean - lo)).

    A screen ended either way is a miss (no confirmation); the value on the curve is the evaluated
    samples' mean, on the missing side of the target. With no risk the outcome is the one the whole
    subset would give, so the reached step is unchanged; a risk r makes a screen whose whole subset
    would reach the target a miss with probability at most r (each screen: a run's screens share one
    order, so they are not independent draws)."""

    def __init__(self, target: Target, bounds, samples: int) -> None:
        self.target, self.samples = target, samples
        lo, hi = bounds
        self.best = hi if target.higher else lo  # a sample's best possible value; None: unbounded
        worst = lo if target.higher else hi
        # no check (each reads the sum back from the device) before k samples at their worst could put the
        # target out of reach: k > n (best - target) / (best - worst); one fewer, for rounding; an unbounded
        # worst: from the first
        self.from_seen = 0 if worst is None or self.best is None or worst == self.best else max(
            0, math.floor(samples * (self.best - target.value) / (self.best - worst)) - 1)
        self.variance = None  # the statistical check's: None = off
        if target.screen_risk > 0 and lo is not None and hi is not None and hi > lo:
            mid = (lo + hi) / 2
            nearest = max(target.value, mid) if target.higher else min(target.value, mid)
            self.variance, self.spread = (hi - nearest) * (nearest - lo), hi - lo
            self.from_seen = 0
        self.checks: Optional[int] = None  # the most checks a screen makes: from its first batch
        self.stopped_at: Optional[int] = None  # samples evaluated when it ended the screen

    def __call__(self, sums: dict, seen: int) -> bool:
        total = sums.get(self.target.metric)
        if total is None or self.best is None or not 0 < seen < self.samples:  # best None: neither check can end it
            return False
        if self.checks is None:
            self.checks = max(1, math.ceil(self.samples / seen) - 1)
        if seen < self.from_seen:
            return False
        total = float(total)
        if not (self._certain(total, seen) or self._beyond_risk(total, seen)):
            return False
        self.stopped_at = seen
        return True

    def _certain(self, total: float, seen: int) -> bool:
        return not self.target.hit((total + (self.samples - seen) * float(self.best)) / self.samples)

    def _beyond_risk(self, total: float, seen: int) -> bool:
        if self.variance is None:
            return False
        short = (self.target.value - total / seen) * (1 if self.target.higher else -1)
        if short <= 0:
            return False
        bound = math.exp(-seen * short ** 2 / (2 * self.variance + 2 * self.spread * short / 3))
        return bound <= self.target.screen_risk / self.checks
