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


def sent_out_by(entry: dict) -> str:
    """``by job J, `` for a raced job a pair's test sent out (``entry``: its race.json ``eliminated`` entry, or
    its row's race outcome); "" where no one is recorded (an earlier fastpipe's races)."""
    return "" if entry.get("by") is None else f"by job {entry['by']}, "


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``12th``, ``13th``, ``21st``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
