"""loss.png: the training loss at each measurement window's edge, on a log axis when it spans more than
10x (a loss that falls from 240 to 1 and then stays flat is a line on the floor of a linear axis), the
held-out primary metric of each evaluation on a second axis (log too under the same rule: a regression's
mse from 220 to 1.04), titled by the run's overrides."""
from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence, Tuple

from fastpipe.record.figures import fit_lines, new_figure

LOSS_DPI = 110
LOG_SPAN = 10.0  # a loss whose largest value is more than this many times its smallest: a log axis
SIZE = (7.0, 4.0)  # inches
TITLE_SIZE = 9.5
LOSS_COLOUR, METRIC_COLOUR = "#1f77b4", "#d62728"


def run_title(overrides: Sequence[str]) -> str:
    """What tells this run from the defaults: its command-line overrides."""
    return " ".join(overrides) if overrides else "the defaults (no overrides)"


def log_axis(losses: Sequence[float]) -> bool:
    """A log axis for a positive loss spanning more than LOG_SPAN."""
    return min(losses) > 0 and max(losses) > LOG_SPAN * min(losses)


def loss_figure(history: Iterable[Tuple[int, float]], title: str, evaluations: Sequence[Tuple[int, float]] = (),
                metric: Optional[dict] = None, dpi: float = LOSS_DPI):
    """The loss.png figure. ``history``: (step, loss) pairs; ``evaluations``: (step, value) of the primary
    metric ``metric`` (metrics.json's primary_metric: name, higher_is_better)."""
    fig = new_figure(figsize=SIZE, dpi=dpi, layout="constrained")
    ax = fig.subplots()
    points = [(s, v) for s, v in history if v is not None and math.isfinite(v)]  # a skipped step's nan
    steps, losses = zip(*points) if points else ((), ())
    ax.plot(steps, losses, color=LOSS_COLOUR, marker="." if len(points) <= 60 else None, linewidth=1.2)
    log = bool(losses) and log_axis(losses)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss" + (" (log scale)" if log else ""), color=LOSS_COLOUR)
    ax.tick_params(axis="y", colors=LOSS_COLOUR)
    ax.grid(alpha=0.3)
    if evaluations and metric:
        _metric_axis(ax, evaluations, metric)
    width = SIZE[0] * 72 - 16  # the title spans the figure, less a margin (points)
    fig.suptitle(fit_lines(title, width, TITLE_SIZE, dpi=dpi), fontsize=TITLE_SIZE)
    return fig


def _metric_axis(ax, evaluations: Sequence[Tuple[int, float]], metric: dict) -> None:
    points = [(s, v) for s, v in evaluations if v is not None and math.isfinite(v)]
    if not points:
        return
    twin = ax.twinx()
    steps, values = zip(*points)
    twin.plot(steps, values, color=METRIC_COLOUR, marker="o", markersize=3, linewidth=1.0)
    log = log_axis(values)
    if log:
        twin.set_yscale("log")
    better = "higher" if metric.get("higher_is_better", True) else "lower"
    twin.set_ylabel(f"held-out {metric['name']} ({better} is better)" + (" (log scale)" if log else ""),
                    color=METRIC_COLOUR)
    twin.tick_params(axis="y", colors=METRIC_COLOUR)


def write_loss_plot(path, history, overrides: Sequence[str], evaluations=(), metric: Optional[dict] = None) -> None:
    """Write loss.png to ``path``."""
    loss_figure(history, run_title(overrides), evaluations, metric).savefig(path, dpi=LOSS_DPI)
