"""The learning-rate range test's curve: the ramp, the smoothed loss, where the loss diverged, whether it
descended at all, the rules that read a rate off it (optimizer.lr=auto; lr_range.py runs the steps), and
its files in the run folder: ``lr_find.csv`` (each step) and ``lr_find.png`` (the smoothed loss against
the rate on a log axis, the suggestion and the point where the loss diverged marked), from metrics.json's
``lr_search``.

Leslie Smith's range test (Cyclical Learning Rates, 2017) as fastai runs it (``lr_find`` in
fastai/callback/schedule.py): rates rising exponentially, one per optimizer step; the loss smoothed by
an exponential moving average (beta 0.98, divided by 1 - beta^n so that the first points are not pulled
towards zero) for the rules to read. Where it stops is not read from that average: its memory of about
50 steps spans five decades of a 100-step ramp, so on ResNet-50 it stayed under fastai's and Lightning's
4x-the-best while the loss had doubled. The test instead follows the loss's trend, the median of its
last ``window`` losses (a single bad batch does not move it; a climb does within ``window // 2 + 1``
steps), and stops once that trend passes ``ratio`` x its lowest, or at a non-finite loss. The rules read
the curve without its first tenth (the average still settling, the rates too small to move anything) and
its last ``window`` points (the climb into divergence, or the ramp's end).
"""
from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

BETA = 0.98  # the moving average's weight on the past
MIN_POINTS = 3  # fewer after trimming: the rules read the whole curve but its last point
DESCENT = 0.1  # a curve whose trend never falls this fraction below its first value did not descend


def ramp(low: float, high: float, steps: int) -> List[float]:
    """``steps`` rates from ``low`` to ``high``, each the last times a constant (equal steps of log(lr))."""
    return [low * (high / low) ** (i / (steps - 1)) for i in range(steps)]


def planned_steps(low: float, high: float, steps: int, per_decade: Optional[int]) -> int:
    """The ramp's length: ``per_decade`` steps for each decade from ``low`` to ``high`` when it is set
    (``train.lr_find_steps_per_decade``), else ``steps`` (``train.lr_find_steps``)."""
    return steps if per_decade is None else max(10, math.ceil(per_decade * math.log10(high / low)) + 1)


@dataclass
class Curve:
    """The test's losses so far: ``add`` one step's, and learn whether to stop (module docstring).
    ``ratio``: ``train.lr_find_diverge_ratio``; ``window``: ``train.lr_find_diverge_steps``."""

    ratio: float = 2.0
    window: int = 5
    beta: float = BETA
    lrs: List[float] = field(default_factory=list)
    losses: List[float] = field(default_factory=list)  # smoothed
    raw: List[float] = field(default_factory=list)  # as measured
    trend: List[float] = field(default_factory=list)  # the median of the last `window` raw losses, from step window-1
    diverged_at: Optional[float] = None  # the rate at which it stopped: non-finite, or the trend past ratio x its low
    _average: float = 0.0

    @property
    def low(self) -> float:
        """The trend's lowest value so far (inf before ``window`` steps)."""
        return min(self.trend, default=math.inf)

    def add(self, lr: float, loss: float) -> bool:
        """Record the loss of the step at ``lr``; True once the test should stop."""
        if not math.isfinite(loss):
            self.diverged_at = lr
            return True
        self._average = self.beta * self._average + (1 - self.beta) * loss
        self.lrs.append(lr)
        self.losses.append(self._average / (1 - self.beta ** (len(self.losses) + 1)))
        self.raw.append(loss)
        if len(self.raw) < self.window:
            return False
        low = self.low
        self.trend.append(statistics.median(self.raw[-self.window:]))
        # a loss that can be negative (a project's own) never stops this way, only on a non-finite one
        if 0 < low < math.inf and self.trend[-1] > self.ratio * low:
            self.diverged_at = lr
            return True
        return False

    def descended(self) -> bool:
        """Whether the trend fell at least ``DESCENT`` of its first value before the test stopped: a flat
        curve, or one that rose from its first steps, holds no rate to read. True under ``window`` steps
        (too short to tell: the caller's count of points decides)."""
        if not self.trend:
            return True
        return self.trend[0] - self.low >= DESCENT * abs(self.trend[0])

    def lowest_lr(self) -> float:
        """The rate at which the trend was lowest (the last of its window)."""
        return self.lrs[self.window - 1 + self.trend.index(self.low)]

    def readable(self, steps: int) -> Optional["Readable"]:
        """The part of the curve the rules read: without its first ``steps // 10`` points and its last
        ``window``; the whole curve but its last point when that leaves fewer than ``MIN_POINTS``; None
        under 2 points."""
        start, end = steps // 10, len(self.losses) - self.window
        if end - start < MIN_POINTS:
            if len(self.losses) < 3:
                return None
            start, end = 0, len(self.losses) - 1
        return Readable(self.lrs[start:end], self.losses[start:end], self.diverged_at)


@dataclass
class Readable:
    """What a rule reads: the rates and smoothed losses of the curve's readable part, and where the loss
    diverged (None: the ramp ended first)."""

    lrs: List[float]
    losses: List[float]
    diverged_at: Optional[float] = None


def valley(part: Readable) -> float:
    """fastai's default rule: the longest descent of the curve (the longest sequence of points, in order,
    each lower than the one before), and the rate half-way along it in steps of the ramp."""
    losses = part.losses
    longest = [1] * len(losses)  # the longest descent ending at each point
    end = 0
    for i in range(1, len(losses)):
        longest[i] = 1 + max((longest[j] for j in range(i) if losses[j] > losses[i]), default=0)
        if longest[i] > longest[end]:
            end = i
    start = max(0, end - longest[end])
    third = (end - start) / 3
    return part.lrs[start + int(third) + int(third / 2)]


def steepest(part: Readable) -> float:
    """The rate where the loss falls fastest per unit of log(lr) (Lightning's and fastai's ``steep``)."""
    lrs, losses = part.lrs, part.losses
    slopes = [(losses[i + 1] - losses[i]) / (math.log(lrs[i + 1]) - math.log(lrs[i])) for i in range(len(lrs) - 1)]
    return lrs[min(range(len(slopes)), key=slopes.__getitem__)]


def min_div10(part: Readable) -> float:
    """A tenth of the rate at the lowest loss (fastai's ``minimum``): the lowest point sits close to where
    the loss turns up, so a tenth of it is a step back onto the descent."""
    return part.lrs[min(range(len(part.losses)), key=part.losses.__getitem__)] / 10


def diverged_div10(part: Readable) -> Optional[float]:
    """A tenth of the rate at which the loss diverged (Smith's rule for one-cycle's peak, from the rate the
    loss leaves at); None when the ramp ended before it diverged."""
    return None if part.diverged_at is None else part.diverged_at / 10


RULES: Dict[str, Callable[[Readable], Optional[float]]] = {
    "valley": valley, "steepest": steepest, "min_div10": min_div10, "diverged_div10": diverged_div10}
# `trial` (lr_range.py) trains from the same start at the rates these rules read, and keeps the best
TRIED = ("valley", "steepest", "min_div10")


def suggest(rule: str, curve: Curve, steps: int) -> Optional[float]:
    """``rule``'s rate on ``curve`` (a test of ``steps`` planned steps), or None when too few points ran
    (or, for ``diverged_div10``, the loss never diverged)."""
    part = curve.readable(steps)
    return None if part is None else RULES[rule](part)


CSV, PNG = "lr_find.csv", "lr_find.png"
DPI = 110


def write_csv(path: Path, search: dict, raw: Optional[Sequence[float]] = None) -> None:
    """One row per step of the test: ``step, lr, loss`` (as measured, when ``raw`` is given), ``smoothed_loss``."""
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(["step", "lr", "loss", "smoothed_loss"])
        for step, (lr, smoothed) in enumerate(search["curve"]):
            out.writerow([step, f"{lr:.6g}", "" if raw is None else f"{raw[step]:.6g}", f"{smoothed:.6g}"])


def figure(search: dict, title: str = ""):
    """The lr_find.png figure."""
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    if search["curve"]:
        lrs, losses = zip(*search["curve"])
        ax.plot(lrs, losses, color="tab:blue", label="smoothed training loss")
    ax.set_xscale("log")
    ax.axvline(search["suggestion"], color="tab:green", linestyle="--",
               label=f"{search['rule']}: {search['suggestion']:.3g}")
    used = search["suggestion"] * search["factor"]
    if search["factor"] != 1:
        ax.axvline(used, color="tab:olive", linestyle=":", label=f"x {search['factor']:g} = {used:.3g} (trained at)")
    if search["diverged_at"] is not None:
        ax.axvline(search["diverged_at"], color="tab:red", linestyle=":",
                   label=f"stopped at {search['diverged_at']:.3g} (diverged)")
    ax.set(xlabel="learning rate", ylabel="training loss (smoothed)")
    ax.set_title(title or f"range test: {search['steps']} steps from {search['min']:g} to {search['max']:g}",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def write(recorder, search: dict, raw: Optional[Sequence[float]] = None) -> None:
    """The range test in the run's record: lr_find.csv and lr_find.png in its folder, and its curve to the
    loggers' ``on_curve`` as ``lr_find/loss`` and ``lr_find/lr`` against the test's own steps, never the
    training steps. ``raw``: each step's loss as measured."""
    if not recorder.enabled:
        return
    import matplotlib.pyplot as plt

    write_csv(recorder.run_dir / CSV, search, raw)
    fig = figure(search)
    fig.savefig(recorder.run_dir / PNG, dpi=DPI)
    plt.close(fig)
    recorder.curve("lr_find/loss", [(i, loss) for i, (_, loss) in enumerate(search["curve"])])
    recorder.curve("lr_find/lr", [(i, lr) for i, (lr, _) in enumerate(search["curve"])])
