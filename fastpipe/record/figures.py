"""What every fastpipe figure (loss.png, report.png) shares: a figure drawn by Agg, and text made
to fit a width in points as the renderer measures it at the figure's dpi (wrapped at spaces, a word or a
last line too long shortened from the middle, where the end of an override or a reason is kept).
``**font`` below: ``family``, ``weight`` and ``dpi`` (glyphs are hinted to the pixels of a dpi, which
makes a text up to a tenth wider or narrower than its outline's width)."""
from __future__ import annotations

from functools import lru_cache
from typing import List

ELLIPSIS = "…"


def new_figure(**options):
    """A matplotlib Figure drawn by Agg (``options``: Figure's, e.g. figsize, dpi, layout): it goes to a
    file, never needs a display, and pyplot never holds it (nothing to close)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(**options)
    FigureCanvasAgg(fig)
    return fig


@lru_cache(maxsize=8)
def _renderer(dpi: float):
    from matplotlib.backends.backend_agg import RendererAgg

    return RendererAgg(1, 1, dpi)


@lru_cache(maxsize=8192)
def text_width(text: str, fontsize: float, family: str = "sans-serif", weight: str = "normal",
               dpi: float = 72.0) -> float:
    """The width of one line of ``text`` in points, as the Agg renderer draws it at ``dpi`` (spaces included)."""
    from matplotlib.font_manager import FontProperties

    font = FontProperties(family=family, size=fontsize, weight=weight)
    return _renderer(float(dpi)).get_text_width_height_descent(text, font, ismath=False)[0] * 72.0 / dpi


def shorten_middle(text: str, width: float, fontsize: float, **font) -> str:
    """``text``, or its start and end around "…" where it is wider than ``width`` points."""
    if text_width(text, fontsize, **font) <= width:
        return text
    low, high = 0, len(text)  # the most characters kept that still fit
    while low < high:
        keep = (low + high + 1) // 2
        if text_width(_cut(text, keep), fontsize, **font) <= width:
            low = keep
        else:
            high = keep - 1
    return _cut(text, low)


def _cut(text: str, keep: int) -> str:
    head = (keep + 1) // 2
    return text[:head] + ELLIPSIS + (text[len(text) - (keep - head):] if keep > head else "")


def fit_lines(text: str, width: float, fontsize: float, max_lines: int = 3, **font) -> str:
    """``text`` wrapped at spaces into lines of at most ``width`` points; a longer word, and what would
    run past ``max_lines``, shortened from the middle."""
    lines: List[str] = []
    for word in text.split():
        word = shorten_middle(word, width, fontsize, **font)
        if lines and text_width(f"{lines[-1]} {word}", fontsize, **font) <= width:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    if len(lines) > max_lines:
        lines = lines[:max_lines - 1] + [shorten_middle(" ".join(lines[max_lines - 1:]), width, fontsize, **font)]
    return "\n".join(lines)
