"""optimizer.lr=auto in a sweep: the rate each job found (its ``lr (found)`` column) and, when the jobs vary
only ``optimizer.lr_auto_factor`` (``+sweep=lr``), whether the range test's own suggestion won, tied or lost."""
from __future__ import annotations

from typing import List, Optional

from fastpipe.sweeps.race.stats import p_text

FACTOR = "optimizer.lr_auto_factor"


def found_rate(metrics: dict) -> Optional[float]:
    """The rate a job trained at when optimizer.lr=auto found it: the suggestion times the factor."""
    search = metrics.get("lr_search") or {}
    return None if search.get("suggestion") is None else search["suggestion"] * search.get("factor", 1.0)


def _time(r: dict) -> str:
    """``median 10.3 s`` (and how many runs missed), or how many runs missed the target when its median did."""
    runs, missed = r.get("target_runs") or 1, r.get("target_missed") or 0
    if r["time_to_target_s"] is not None:
        return f"median {r['time_to_target_s']:,.1f} s" + (f" ({missed} of {runs} runs missed)" if missed else "")
    return f"missed the target in {missed} of {runs} runs" if runs > 1 else "not reached"


def _fate(r: dict) -> str:
    """How a raced factor ended, where its time alone would mislead: sent out (by whom), or still in the race
    though it never reached the target (a tie is "not told apart yet", not "as fast")."""
    race = r.get("race") or {}
    if race.get("state") == "out":
        by = f"by job {race['by']}, " if race.get("by") is not None else ""
        return f" (out after round {race['round']}, {by}{p_text(race['p'])})"
    return " (not told apart from the others yet)" if race.get("state") == "tie" and r["time_to_target_s"] is None else ""


def _each(rows: List[dict]) -> str:
    return "; ".join(f"{r['swept'][FACTOR]}x {_time(r)}{_fate(r)}" for r in rows)


def _margin(own: dict, others: List[dict]) -> str:
    """How much sooner the suggestion reached the target than the next factor (none when no other reached it)."""
    reached = [r for r in others if r["time_to_target_s"]]
    if not own["time_to_target_s"] or not reached:
        return ""
    nxt = min(reached, key=lambda r: r["time_to_target_s"])
    return f", {nxt['time_to_target_s'] / own['time_to_target_s']:.2f}x sooner than the next ({nxt['swept'][FACTOR]}x)"


def suggestion_lines(result) -> List[str]:
    """The header line on the suggestion against its multiples (``+sweep=lr``); none for other sweeps."""
    rows = [r for r in result.rows if r.get("lr_found") is not None]
    if FACTOR not in result.columns or not rows:
        return []
    own = next((r for r in rows if float(r["swept"][FACTOR]) == 1.0), None)
    if own is None:
        return []
    rule, rate = own.get("lr_rule") or "range test", own["lr_found"]
    others = [r for r in rows if r is not own]
    head = f"- learning rate: the range test's suggestion ({rule}, {rate:.3g})"
    if result.best is own:
        return [f"{head} won: {_time(own)}{_margin(own, others)}; {_each(others)}"]
    if own.get("tie"):  # the tied factors, then the rest: "either rate" is said of the tie alone
        tied, rest = [r for r in others if r.get("tie")], [r for r in others if not r.get("tie")]
        either = "either rate" if len(tied) == 1 else "any of these rates"
        return [f"{head} tied with {', '.join(r['swept'][FACTOR] + 'x' for r in tied)}: {_time(own)}; {_each(tied)}: "
                f"{either}" + (f"; {_each(rest)}" if rest else "")]
    best = result.best
    if best is None or best.get("lr_found") is None:
        return [f"{head}: {_time(own)}{_fate(own)}; {_each(others)}; no winner"]
    sooner = (f", {own['time_to_target_s'] / best['time_to_target_s']:.2f}x sooner" if own["time_to_target_s"]
              and best["time_to_target_s"] else "")
    return [f"- learning rate: {best['swept'][FACTOR]}x the suggestion won ({best['lr_found']:.3g}, {_time(best)} "
            f"against the suggestion's {_time(own)}{sooner}{_fate(own)}): commit optimizer.lr={best['lr_found']:.3g} "
            f"or {FACTOR}={best['swept'][FACTOR]}"]
