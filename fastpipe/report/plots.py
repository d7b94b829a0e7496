"""report.png: the sweep's jobs in the report's order, each in a colour of its own throughout, the winner
alone outlined in black and named "best".

- Bars: each job's ranked quantity, its bar as long as the number written after it: time to target
  under ``report.objective=time_to_target`` (a job that missed it: an open hatched bar to where its
  run stopped, "> N s"), else steady-state throughput with the speed-up against the baseline. A job
  without that number gets no bar but its status and reason. The jobs' labels are a table: the swept
  keys once above, their values in aligned columns.
- With a target (train.target): the primary metric of every whole-split evaluation against the
  training clock (plot_curves.py).
- A race (``race.json``: hydra/sweeper=race, or a halving sweep's finalists): each job's time to
  target per seed, by round (race_panel.py).
Every text is wrapped or shortened from the middle to fit the figure; legends give way to labels
beside the lines.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

from fastpipe.record.figures import fit_lines, new_figure, shorten_middle
from fastpipe.report.plot_bars import throughput_bar, time_bar
from fastpipe.report.plot_curves import curve_points, curves_panel
from fastpipe.report.plot_parts import (FAILED, MONO, TABLE_SIZE, WINNER_EDGE, end_labels, job_colours,
                                        job_table, table_width)
from fastpipe.report.race_panel import panel_height, race_panel
from fastpipe.report.aggregate import SweepResult
from fastpipe.sweeps.autotune import record as autotune
from fastpipe.sweeps.race import rounds

DPI = 110
WIDTH = 11.0  # inches
ROW_IN, PANEL_IN = 0.27, 4.2  # a bar's height; a curve or race panel's
TITLE_SIZE, PANEL_TITLE_SIZE, TEXT_SIZE = 11.0, 9.5, 8.0
TEXT_PAD = 4.0  # points between a bar's end and its text


def write_plot(result: SweepResult, path: Path, dpi: int = DPI) -> None:
    """Write report.png for ``result`` to ``path``."""
    report_figure(result, dpi).savefig(path, dpi=dpi)


def report_figure(result: SweepResult, dpi: int = DPI):
    """The figure of report.png: the bars, then the target's curves and the race where there are."""
    raced = result.race
    if raced is None and autotune.read(result.sweep_dir) is None:  # an autotune's races are its trials
        raced = rounds.read(result.sweep_dir)
    raced = raced if raced is not None and raced.rounds else None
    has_curves = any(curve_points(r) for r in result.rows)
    heights = [0.9 + ROW_IN * max(len(result.rows), 2)] + [PANEL_IN] * has_curves
    heights += [panel_height(raced)] if raced is not None else []
    fig = new_figure(figsize=(WIDTH, sum(heights) + 0.5), dpi=dpi, layout="constrained")
    axes = list(fig.subplots(len(heights), 1, height_ratios=heights, squeeze=False)[:, 0])
    colours = job_colours([r["job"] for r in result.rows] + (list(raced.entrants) if raced else []))
    header, labels = job_table(result.rows, result.columns)
    left = table_width([header, *labels.values()], dpi)
    room = WIDTH * 72 - left - 110  # a panel title's width: the figure less the job table and the side labels
    fig.suptitle(fit_lines(_title(result), WIDTH * 72 - 20, TITLE_SIZE, max_lines=2, dpi=dpi), fontsize=TITLE_SIZE)
    texts = bar_panel(axes.pop(0), result, colours, (header, labels, left), room)
    if raced is not None:
        race_panel(axes[-1], raced, colours, [r["job"] for r in result.rows], room)
    if has_curves:
        end_labels(axes[0], curves_panel(axes[0], result, colours, room))
    fit_bar_texts(texts)
    return fig


NO_WINNER = {"tie": "a tie: no winner named", "unstable": "the leader's repeats spread too wide: no winner named",
             "untested": "one run per job, too close to call: no winner named",
             "last_standing": "the last standing, its rivals failed: no winner named"}


def _title(result: SweepResult) -> str:
    how = {"time_to_target": "time to target (train.target)", "primary_metric": "held-out primary metric"}
    best = result.best
    return (f"fastpipe sweep {result.sweep_dir.parent.name}/{result.sweep_dir.name}: {len(result.rows)} job{'s' * (len(result.rows) != 1)} ranked "
            f"by {how.get(result.spec.objective, 'throughput')}; "
            + (f"best: job {best['job']}" if best is not None else
               NO_WINNER.get(result.confidence.kind, "no winner named") if result.candidate is not None else
               "no job qualifies as best"))


def bar_panel(ax, result: SweepResult, colours, table, room: float) -> List[Tuple[float, object]]:
    """The bars, fastest on top; returns each text with the x where it starts (fit_bar_texts' input)."""
    header, labels, left = table
    dpi = ax.figure.dpi
    to_target = result.spec.objective == "time_to_target"
    texts = []
    for y, r in enumerate(result.rows):
        bar = time_bar(r) if to_target else throughput_bar(r, result.spec.objective)
        best, colour = bool(r.get("best")), colours[r["job"]]
        if bar.value is None:
            texts.append((0.0, ax.annotate(shorten_middle(bar.text, room * 0.8, TEXT_SIZE, dpi=dpi), xy=(0, y),
                                           xytext=(TEXT_PAD, 0), textcoords="offset points", va="center",
                                           fontsize=TEXT_SIZE, color=FAILED)))
            continue
        err = None if bar.low is None else [[bar.value - bar.low], [bar.high - bar.value]]
        ax.barh(y, bar.value, height=0.72, color=colour if bar.filled else "none",
                edgecolor=WINNER_EDGE if best else colour, linewidth=2.2 if best else 1.0,
                hatch=None if bar.filled else "////", xerr=err, capsize=3, error_kw=dict(linewidth=0.8))
        end = max(bar.value, bar.high or 0.0)
        texts.append((end, ax.annotate(bar.text, xy=(end, y), xytext=(TEXT_PAD, 0), textcoords="offset points",
                                       va="center", fontsize=TEXT_SIZE, fontweight="bold" if best else "normal")))
    ax.set_yticks(range(len(result.rows)))
    ax.set_yticklabels([labels[r["job"]] for r in result.rows], fontsize=TABLE_SIZE, **MONO)
    for tick, r in zip(ax.get_yticklabels(), result.rows):
        tick.set_horizontalalignment("left")  # the table's columns line up from its left edge
        tick.set_fontweight("bold" if r.get("best") else "normal")
    ax.tick_params(axis="y", length=0, pad=left + 6)
    ax.annotate(header, xy=(0, 1), xycoords="axes fraction", xytext=(-(left + 6), 3), textcoords="offset points",
                ha="left", va="bottom", fontsize=TABLE_SIZE, color="#555555", fontweight="bold", **MONO)
    ax.set_ylim(len(result.rows) - 0.5, -0.5)  # the report's first row on top
    what = (_time_axis(result.spec.target_clock) if to_target
            else "steady-state throughput (samples/s, longer is better)")
    ax.set_xlabel(fit_lines(what, room, 9, dpi=dpi), fontsize=9)
    spread = any((r.get("repeats") or 1) > 1 or r.get("target_min") is not None for r in result.rows)
    title = _bar_title(to_target) + ("; whiskers: min..max over the seeds" if spread else "")
    ax.set_title(fit_lines(title, room, PANEL_TITLE_SIZE, dpi=dpi), loc="left", fontsize=PANEL_TITLE_SIZE)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    return texts


def _time_axis(clock: str) -> str:
    if clock == "training":
        return "time to target (s, training clock: from the first training step; shorter is better)"
    return "time to target (s, end-to-end clock: from the job's start; shorter is better)"


def _bar_title(to_target: bool) -> str:
    if to_target:
        return ("Time to target per job, its speed-up against the baseline after each bar; hatched: never reached "
                "the target, the bar ending where the run stopped")
    return "Throughput per job, its speed-up against the baseline after each bar"


def fit_bar_texts(texts: List[Tuple[float, object]]) -> None:
    """Widen the bars' axis until every text after a bar ends inside it (its width measured as drawn)."""
    if not texts:
        return
    ax = texts[0][1].axes
    ax.figure.draw_without_rendering()  # the layout, measured without painting
    width, pad = ax.bbox.width, TEXT_PAD * ax.figure.dpi / 72
    top = max([end for end, _ in texts] + [1e-9])
    need = top * 1.02
    for end, text in texts:
        room = max(0.98 * width - pad - text.get_window_extent().width, 0.25 * width)
        need = max(need, end * width / room)
    ax.set_xlim(0, need)
