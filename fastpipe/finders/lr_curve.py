"""The learning-rate range test's curve: the ramp, the smoothed loss, where it stops, the rules that read a
rate off it (optimizer.lr=auto; lr_range.py runs the steps), and its files in the run folder: ``lr_find.csv``
(each step) and ``lr_find.png`` (the smoothed loss against the rate on a log axis, the suggestion and the
point where the loss diverged marked), from metrics.json's ``lr_search``.

Leslie Smith's range test (Cyclical Learning Rates, 2017) as fastai runs it (``lr_find`` in
fastai/callback/schedule.py): rates rising exponentially, one per optimizer step; the loss smoothed by
an exponential moving average (beta 0.98, divided by 1 - beta^n so that the first points are not pulled
towards zero); stopped once the smoothed loss passes 4x the best so far or a loss is non-finite. The
rules read the curve without its first tenth (the average still settling, the rates too small to move
anything) and its last 5 points (the climb into divergence), as fastai's do.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

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
