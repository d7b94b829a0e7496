"""The learning-rate range test's numbers: the ramp, the smoothed loss curve, where it stops, and the
rules that read a rate off it (optimizer.lr=auto; train/lr_find.py runs the steps).

Leslie Smith's range test (Cyclical Learning Rates, 2017) as fastai runs it (``lr_find`` in
fastai/callback/schedule.py): rates rising exponentially, one per optimizer step; the loss smoothed by
an exponential moving average (beta 0.98, divided by 1 - beta^n so that the first points are not pulled
towards zero); stopped once the smoothed loss passes 4x the best so far or a loss is non-finite. The
rules read the curve without its first tenth (the average still settling, the rates too small to move
anything) and its last 5 points (the climb into divergence), as fastai's do.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

BETA = 0.98  # the moving average's weight on the past
DIVERGED = 4.0  # the smoothed loss past this many times its best: the rate is too large
TAIL = 5  # the last points the rules leave out
MIN_POINTS = 3  # fewer after trimming: the rules read the whole curve but its last point


def ramp(low: float, high: float, steps: int) -> List[float]:
    """``steps`` rates from ``low`` to ``high``, each the last times a constant (equal steps of log(lr))."""
    return [low * (high / low) ** (i / (steps - 1)) for i in range(steps)]


@dataclass
class Curve:
    """The test's losses so far: ``add`` one step's, and learn whether to stop."""

    beta: float = BETA
    lrs: List[float] = field(default_factory=list)
    losses: List[float] = field(default_factory=list)  # smoothed
    raw: List[float] = field(default_factory=list)  # as measured
    best: float = math.inf
    diverged_at: Optional[float] = None  # the rate at which it stopped: non-finite, or past DIVERGED x best
    _average: float = 0.0

    def add(self, lr: float, loss: float) -> bool:
        """Record the loss of the step at ``lr``; True once the test should stop."""
        if not math.isfinite(loss):
            self.diverged_at = lr
            return True
        self._average = self.beta * self._average + (1 - self.beta) * loss
        smoothed = self._average / (1 - self.beta ** (len(self.losses) + 1))
        self.lrs.append(lr)
        self.losses.append(smoothed)
        self.raw.append(loss)
        self.best = min(self.best, smoothed)
        # a loss that can be negative (a project's own) never stops this way, only on a non-finite one
        if self.best > 0 and smoothed > DIVERGED * self.best:
            self.diverged_at = lr
            return True
        return False


def readable(lrs: List[float], losses: List[float], steps: int) -> Optional[Tuple[List[float], List[float]]]:
    """The part of the curve the rules read: without its first ``steps // 10`` points and its last ``TAIL``;
    the whole curve but its last point when that leaves fewer than ``MIN_POINTS``; None under 2 points."""
    start, end = steps // 10, len(losses) - TAIL
    if end - start >= MIN_POINTS:
        return lrs[start:end], losses[start:end]
    if len(losses) - 1 >= 2:
        return lrs[:-1], losses[:-1]
    return None


def valley(lrs: List[float], losses: List[float]) -> float:
    """fastai's default rule: the longest descent of the curve (the longest sequence of points, in order,
    each lower than the one before), and the rate half-way along it in steps of the ramp."""
    longest = [1] * len(losses)  # the longest descent ending at each point
    end = 0
    for i in range(1, len(losses)):
        longest[i] = 1 + max((longest[j] for j in range(i) if losses[j] > losses[i]), default=0)
        if longest[i] > longest[end]:
            end = i
    start = max(0, end - longest[end])
    third = (end - start) / 3
    return lrs[start + int(third) + int(third / 2)]


def steepest(lrs: List[float], losses: List[float]) -> float:
    """The rate where the loss falls fastest per unit of log(lr) (Lightning's and fastai's ``steep``)."""
    slopes = [(losses[i + 1] - losses[i]) / (math.log(lrs[i + 1]) - math.log(lrs[i])) for i in range(len(lrs) - 1)]
    return lrs[min(range(len(slopes)), key=slopes.__getitem__)]


def min_div10(lrs: List[float], losses: List[float]) -> float:
    """A tenth of the rate at the lowest loss (fastai's ``minimum``): the lowest point sits close to where
    the loss turns up, so a tenth of it is a step back onto the descent."""
    return lrs[min(range(len(losses)), key=losses.__getitem__)] / 10


RULES: Dict[str, Callable[[List[float], List[float]], float]] = {
    "valley": valley, "steepest": steepest, "min_div10": min_div10}


def suggest(rule: str, curve: Curve, steps: int) -> Optional[float]:
    """``rule``'s rate on ``curve`` (a test of ``steps`` planned steps), or None when too few points ran."""
    part = readable(curve.lrs, curve.losses, steps)
    return None if part is None else RULES[rule](*part)
