"""report.png's race panel (``race.json``, fastpipe/sweeps/race/rounds.py): a table of each job's time to target
on each round's seed, one row per job (its number in its colour, the report's order), one column per
round. A cell is shaded by the job's rank within that seed (the paired comparison the race tests: darker
is sooner) and says the seconds, or ``miss``, ``cap`` (stopped at the round's cap) or ``failed``; an
eliminated job's row is grey; beside each row, its median and how it left the race or ended it."""
from __future__ import annotations

import math
from typing import Dict, Sequence

import numpy as np

from fastpipe.record.figures import fit_lines, shorten_middle
from fastpipe.report.plot_parts import ELIMINATED, FAILED, readable
from fastpipe.sweeps.race.rounds import RaceRecord, median_time
from fastpipe.sweeps.race.stats import p_text

SIZE = 9.5
CELL_SIZE = 7.5  # a cell's text, at most (points)
ROW_IN = 0.24  # inches per job


def panel_height(record: RaceRecord) -> float:
    """The race panel's height in inches."""
    return 1.2 + ROW_IN * max(len(record.entrants), 2)


def cells(record: RaceRecord, order: Sequence[int]) -> Dict[tuple, tuple]:
    """{(row, round index): (text, rank fraction 0 = soonest .. 1, or None)} of every run of the race."""
    out = {}
    for col, r in enumerate(record.rounds):
        ran = [n for n in r["jobs"] if str(n) in r["values"]]
        keys = {n: math.inf if r["values"][str(n)] is None else r["values"][str(n)] for n in ran}
        ranked = sorted(set(keys.values()))
        for row, n in enumerate(order):
            if n in (r.get("failed") or []):
                out[row, col] = ("failed", None)
            elif n in keys:
                value = r["values"][str(n)]
                text = f"{value:,.1f}" if value is not None else "cap" if n in (r.get("capped") or []) else "miss"
                out[row, col] = (text, ranked.index(keys[n]) / max(len(ranked) - 1, 1))
    return out


def race_panel(ax, record: RaceRecord, colours: Dict[int, str], order: Sequence[int], room: float) -> None:
    """Draw the race's table on ``ax``; ``order``: the report's job order (entrants not in it go last)."""
    from matplotlib import colormaps

    dpi = ax.figure.dpi
    jobs = [n for n in order if n in record.entrants] + [n for n in record.entrants if n not in order]
    shade, grey = colormaps["Greens"], colormaps["Greys"]
    table = cells(record, jobs)
    size = min(CELL_SIZE, (room / max(len(record.rounds), 1)) / 3.6)  # five characters fit a cell
    image = np.ones((len(jobs), len(record.rounds), 4))
    for (row, col), (text, rank) in table.items():
        out = str(jobs[row]) in record.eliminated
        if rank is not None:
            image[row, col] = (grey if out else shade)(0.55 - 0.45 * rank)  # sooner is darker
        ax.text(col, row, text, ha="center", va="center", fontsize=size, clip_on=True,
                color=FAILED if text == "failed" else ELIMINATED if out else "black",
                fontstyle="italic" if text in ("miss", "cap") else "normal")
    ax.imshow(image, aspect="auto", interpolation="nearest")
    ax.set_yticks(range(len(jobs)))
    ax.set_yticklabels([f"#{n}" for n in jobs], fontsize=8)
    for tick, n in zip(ax.get_yticklabels(), jobs):
        tick.set_color(ELIMINATED if str(n) in record.eliminated else readable(colours.get(n, "black")))
        tick.set_fontweight("bold" if n == record.winner else "normal")
    ax.set_xticks(range(len(record.rounds)))
    ax.set_xticklabels([f"{r['round']}\nseed {r['seed']}" for r in record.rounds], fontsize=7.5)
    ax.tick_params(length=0)
    ax.set_xticks(np.arange(len(record.rounds) + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(len(jobs) + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="white", linewidth=1.0)
    ax.text(1.01, -0.5, "median (s)", transform=ax.get_yaxis_transform(), va="bottom", ha="left", fontsize=7.5,
            fontweight="bold", color="#555555")
    for row, n in enumerate(jobs):
        ax.text(1.01, row, shorten_middle(_fate(record, n), 150, 7.5, dpi=dpi), transform=ax.get_yaxis_transform(),
                va="center", ha="left", fontsize=7.5, color=ELIMINATED if str(n) in record.eliminated else "black")
    ax.set_xlabel("round: every job still in the race trains once with the round's seed")
    ax.set_title(fit_lines(_title(record), room, SIZE, dpi=dpi), loc="left", fontsize=SIZE)


def _fate(record: RaceRecord, n: int) -> str:
    """Beside job ``n``'s row: its median time, then winner, tie, how it left the race, or nothing (still in)."""
    median = median_time(record.times(n))
    text = f"{median:,.1f}" if median is not None else "miss"
    gone = record.eliminated.get(str(n))
    if gone is not None:
        if str(gone.get("reason", "")).startswith("failed"):
            return f"{text} · failed in round {gone['round']}"
        return (f"{text} · out in round {gone['round']}" + (f", by job {gone.get('by')}" if gone.get("by") is not None
                                                           else "")
                + (f", {p_text(gone['p'])}" if gone.get("p") is not None else ""))
    return text + (" · winner" if n == record.winner else " · last standing" if n == record.last_standing
                   else " · tie" if n in (record.tie or []) else "")


def _title(record: RaceRecord) -> str:
    seeds, alpha = len(record.rounds), record.settings.get("alpha", 0.05)
    who = "The finalists' race" if record.folder else "Race"
    if record.winner is not None:
        end = f"winner: job {record.winner}, every other sent out at alpha {alpha:g} over the race, after {seeds} seeds"
    elif record.last_standing is not None:
        end = f"last standing: job {record.last_standing} (the others failed: no winner named)"
    elif record.tie:
        end = (f"tie: jobs {', '.join(map(str, record.tie))} ({seeds} seeds, "
               f"{str(record.stopped_by or 'max_rounds').replace('_', ' ')} reached)")
    elif record.stopped_by == "all_failed":
        end = "every job failed"
    else:
        end = f"still racing after {seeds} rounds"
    clock = record.settings.get("clock", "training")
    return (f"{who}: time to target (s, {clock} clock) per job and seed, shaded by rank within the seed "
            f"(darker: sooner); grey: eliminated; {end}")
