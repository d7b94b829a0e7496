"""What report.png's panels share: one colour per job, each job's label as a row of a table (the swept
keys' values in aligned columns, the keys once above them), and labels at the ends of lines placed so
that none covers another."""
from __future__ import annotations

from typing import Dict, Iterable, List, Sequence, Tuple

from fastpipe.record.figures import ELLIPSIS, text_width

WINNER_EDGE = "black"
ELIMINATED = "#888888"  # a race's eliminated jobs (their cells: shades of grey)
FAILED = "#d62728"  # the text of a job without a number
MONO = dict(family="monospace")
TABLE_SIZE = 8.0  # the job table's font size (points)
TABLE_CHARS = 56  # the widest the job table may be, in characters
COLUMN_MIN = 5  # a column is narrowed to no fewer characters


def job_colours(nums: Iterable[int]) -> Dict[int, str]:
    """A colour of its own for every job number, stable across the panels: tab10 for up to ten jobs,
    then tab20, tab20b and tab20c, then a hue wheel; never a grey (a race's eliminated jobs are grey)."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    nums = sorted(set(nums))
    if len(nums) <= 9:
        palette = [to_hex(c) for i, c in enumerate(colormaps["tab10"].colors) if i != 7]
    else:
        palette = [to_hex(c) for i, c in enumerate(colormaps["tab20"].colors) if i not in (14, 15)]
        palette += [to_hex(c) for name in ("tab20b", "tab20c") for c in colormaps[name].colors[:16]]
    if len(nums) > len(palette):
        wheel = colormaps["hsv"]
        palette = [to_hex(wheel(i / len(nums))) for i in range(len(nums))]
    return {n: palette[i] for i, n in enumerate(nums)}


def readable(colour: str) -> str:
    """``colour``, darkened where it is too pale for text on white (tab20's light halves)."""
    from matplotlib.colors import to_hex, to_rgb

    rgb = to_rgb(colour)
    light = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]
    return colour if light < 0.55 else to_hex([c * 0.55 / light for c in rgb])


def short_keys(keys: Sequence[str]) -> List[str]:
    """Each swept key by its last part (``optimizer.lr`` -> ``lr``) where that names it alone."""
    last = [k.lstrip("+~").rsplit(".", 1)[-1] for k in keys]
    return [s if last.count(s) == 1 else k.lstrip("+~") for s, k in zip(last, keys)]


def _clip(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    head = (width - 1 + 1) // 2
    return text[:head] + ELLIPSIS + text[len(text) - (width - 1 - head):]


def header_lines(name: str) -> Tuple[str, str]:
    """A column's name on two lines, split at the ``_``, ``.`` or ``-`` nearest its middle (``batch_size``
    -> ``batch``, ``size``), so that a column is as narrow as its values allow."""
    cuts = [i for i, c in enumerate(name) if c in "_.-" and 0 < i < len(name) - 1]
    if not cuts or len(name) <= 5:
        return "", name
    cut = min(cuts, key=lambda i: abs(len(name) - 2 * i))
    return name[:cut], name[cut + 1:]


def job_table(rows: Sequence[dict], keys: Sequence[str]) -> Tuple[str, Dict[int, str]]:
    """(header, {job: label}): ``#N`` and each swept key's value in columns of a monospaced font under a
    two-line header of the keys' names, the widest columns narrowed (their texts shortened in the
    middle) until the table is at most TABLE_CHARS wide."""
    names = [("", "job")] + [header_lines(k) for k in short_keys(keys)]
    cells = {r["job"]: [f"#{r['job']}"] + [str(r["swept"].get(k, "")) for k in keys] for r in rows}
    widths = [max([len(names[i][0]), len(names[i][1])] + [len(c[i]) for c in cells.values()])
              for i in range(len(names))]
    while sum(widths) + 2 * (len(widths) - 1) > TABLE_CHARS and max(widths[1:], default=0) > COLUMN_MIN:
        widest = max(range(1, len(widths)), key=lambda i: widths[i])
        widths[widest] -= 1

    def line(texts: List[str]) -> str:
        return "  ".join(_clip(t, w).ljust(w) for t, w in zip(texts, widths)).rstrip()
    header = [line([n[0] for n in names]), line([n[1] for n in names])]
    return "\n".join(h for h in header if h), {job: line(c) for job, c in cells.items()}


def table_width(lines: Iterable[str], dpi: float) -> float:
    """The widest of the table's lines, in points."""
    return max((text_width(s, TABLE_SIZE, dpi=dpi, **MONO) for text in lines for s in text.split("\n")), default=0.0)


def end_labels(ax, ends: Sequence[Tuple[float, float, str, str]], fontsize: float = 8.0) -> None:
    """Label each line at its end (x, y, text, colour), in the order given: right of the end where that
    space is free and inside the axes, else a line height or more above or below it (on its left when
    the right has no room), tied to the end by a thin leader; call once the axes' limits are final."""
    from matplotlib.transforms import Bbox

    if not ends:
        return
    fig = ax.figure
    fig.draw_without_rendering()  # the layout: where the axes and the line ends are, in pixels
    scale, frame, placed = fig.dpi / 72, ax.bbox, []
    height, pad = 1.3 * fontsize * scale, 4 * scale
    for x, y, text, colour in ends:
        px, py = ax.transData.transform((x, y))
        width = text_width(text, fontsize, dpi=fig.dpi) * scale
        right, left = pad, -pad - width  # left of the end at its own height lies on the line that leads there
        spots = ([(right, k * height) for k in (0, 1, -1, 2, -2)] + [(left, k * height) for k in (1, -1, 0, 2, -2)]
                 + [(dx, k * height) for k in (3, -3, 4, -4) for dx in (right, left)])
        boxes = [(dx, dy, Bbox.from_extents(px + dx, py + dy - height / 2, px + dx + width, py + dy + height / 2))
                 for dx, dy in spots]
        free = [(dx, dy, b) for dx, dy, b in boxes if _inside(b, frame) and not any(b.overlaps(o) for o in placed)]
        dx, dy, box = free[0] if free else boxes[0]
        placed.append(box)
        label = ax.annotate(text, xy=(x, y), xytext=(dx / scale, dy / scale), textcoords="offset points", ha="left",
                            va="center", fontsize=fontsize, color=readable(colour), zorder=5,
                            bbox=dict(boxstyle="square,pad=0.1", facecolor="white", edgecolor="none", alpha=0.75),
                            arrowprops=dict(arrowstyle="-", color=colour, linewidth=0.5, shrinkA=0, shrinkB=2)
                            if dy else None)
        label.set_in_layout(False)  # placed inside the axes: the layout, hence the ends' places, stays as measured


def _inside(box, frame) -> bool:
    return frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
