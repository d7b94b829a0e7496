"""How report cells show numbers (shared by report.md's tables and the time-to-target lines)."""
from __future__ import annotations

from typing import Optional


def metric_text(name: Optional[str], value: Optional[float], delta: bool = False) -> str:
    """A held-out metric for a report cell: accuracy in % (a difference in pp), others in their units."""
    if value is None:
        return "n/a"
    if name == "accuracy":
        return f"{100 * value:+.1f} pp" if delta else f"{100 * value:.1f} %"
    return f"{value:+.4g}" if delta else f"{value:.4g}"
