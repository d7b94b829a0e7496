"""report.png's target panel: each job's primary held-out metric at every whole-split evaluation against
the training clock, the target as a dotted line; the first few in the report's order labelled beside the
panel and drawn in full, the rest faint, the winner outlined."""
from __future__ import annotations

from typing import List, Tuple

from matplotlib import patheffects
from matplotlib.transforms import blended_transform_factory

from fastpipe.record.figures import fit_lines
from fastpipe.report.formats import metric_text
from fastpipe.report.plot_parts import WINNER_EDGE

LABELLED = 6  # jobs labelled beside the panel, in the report's order (with the winner and the baseline)
SIZE = 9.5


def curve_points(r: dict) -> List[Tuple[float, float]]:
    """(seconds, value) of a row's whole-split evaluations (a screened subset's are not the metric)."""
    return [(c["seconds"], c["value"]) for c in r.get("curve") or []
            if not c.get("subset") and c.get("value") is not None and c.get("seconds") is not None]


def curves_panel(ax, result, colours, room: float) -> List[tuple]:
    """Draw the curves; returns the labelled lines' ends (x, y, text, colour) for end_labels."""
    rows = [r for r in result.rows if curve_points(r)]
    shown = {r["job"] for r in rows[:LABELLED]} | {r["job"] for r in rows if r.get("best") or r.get("baseline")}
    ends = []
    for r in reversed(rows):  # the report's first rows drawn last, on top
        xs, ys = zip(*curve_points(r))
        lit, colour = r["job"] in shown, colours[r["job"]]
        style = dict(linewidth=1.6 if lit else 0.8, alpha=1.0 if lit else 0.35, zorder=3 if lit else 2)
        if r.get("best"):
            style.update(linewidth=2.4, zorder=4,
                         path_effects=[patheffects.withStroke(linewidth=4.0, foreground=WINNER_EDGE)])
        ax.plot(xs, ys, color=colour, marker="." if lit else None, linestyle="-" if r.get("target_reached") else "--",
                **style)
        if lit:
            note = " best" if r.get("best") else " baseline" if r.get("baseline") else ""
            ends.append((xs[-1], ys[-1], f"#{r['job']}{note}", colour))
    target = next((r for r in result.rows if r.get("target") is not None), None)
    metric = target["target_metric"] if target else "metric"
    if target is not None:
        ax.axhline(target["target"], color="black", linewidth=0.8, linestyle=":")
        ax.annotate(f"target {metric_text(metric, target['target'])}", xy=(0, target["target"]),
                    xycoords=blended_transform_factory(ax.transAxes, ax.transData), xytext=(3, 2),
                    textcoords="offset points", fontsize=8, va="bottom")
    ax.set_xlabel(fit_lines("training seconds (from the first step: compilation, evaluations, checkpoints included)",
                            room, 9, dpi=ax.figure.dpi), fontsize=9)
    ax.set_ylabel(f"held-out {metric}")
    rest = len(rows) - len(shown)
    title = (f"Held-out {metric} at each evaluation against the training clock; dashed: never reached the target"
             + (f"; the first {LABELLED} in the report's order labelled, {rest} more faint" if rest > 0 else ""))
    ax.set_title(fit_lines(title, room, SIZE, dpi=ax.figure.dpi), loc="left", fontsize=SIZE)
    ax.grid(alpha=0.3)
    return ends[::-1]  # labelled in the report's order: the winner's label first where it wants it
