"""What the plot tests check of a matplotlib figure, with its renderer: the texts it draws and which of
them leave the figure."""
from __future__ import annotations

from typing import List

from matplotlib.text import Text


def drawn_texts(fig) -> List[Text]:
    """Every non-empty visible text the figure draws (titles, labels, annotations, legends, tick labels
    at ticks inside their axis' limits: the others are kept but not drawn)."""
    fig.draw_without_rendering()
    hidden = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not low - 1e-9 <= tick.get_loc() <= high + 1e-9:
                    hidden.update((id(tick.label1), id(tick.label2)))
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and id(t) not in hidden]


def texts_outside(fig) -> List[str]:
    """The texts whose extent, as the renderer draws them, is not wholly inside the figure."""
    renderer, frame = fig.canvas.get_renderer(), fig.bbox
    out = []
    for text in drawn_texts(fig):
        box = text.get_window_extent(renderer)
        if box.x0 < frame.x0 - 0.5 or box.x1 > frame.x1 + 0.5 or box.y0 < frame.y0 - 0.5 or box.y1 > frame.y1 + 0.5:
            out.append(text.get_text())
    return out


def overlapping(texts: List[Text]) -> List[tuple]:
    """Pairs of these texts whose drawn extents overlap (an annotation's text, without its leader line)."""
    renderer = texts[0].figure.canvas.get_renderer() if texts else None
    boxes = [(t.get_text(), Text.get_window_extent(t, renderer)) for t in texts]
    return [(a, b) for i, (a, box) in enumerate(boxes) for b, other in boxes[i + 1:] if box.overlaps(other)]
