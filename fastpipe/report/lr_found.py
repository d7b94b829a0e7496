"""optimizer.lr=auto in a sweep: the rate each job found (its ``lr (found)`` column) and, when the jobs are
``+sweep=lr``'s candidates (``lr_candidate``: the given rate, 0.3x, 1x and 3x the suggestion) or vary
``optimizer.lr_auto_factor``, whether the range test's own suggestion won, tied or lost."""
from __future__ import annotations

from typing import List, Optional

from fastpipe.report.formats import sent_out_by
from fastpipe.sweeps.race.stats import p_text

FACTOR = "optimizer.lr_auto_factor"
CANDIDATE = "lr_candidate"  # +sweep=lr's group: given, auto_third, auto, auto_triple


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
    """How a raced candidate ended, where its time alone would mislead: sent out (by whom), or still in the
    race though it never reached the target (a tie is "not told apart yet", not "as fast")."""
    race = r.get("race") or {}
    if race.get("state") == "out":
        return f" (out after round {race['round']}, {sent_out_by(race)}{p_text(race['p'])})"
    return " (not told apart from the others yet)" if race.get("state") == "tie" and r["time_to_target_s"] is None else ""


def _label(r: dict) -> str:
    """``3x`` for a multiple of the suggestion, ``the given rate`` for the project's own (+lr_candidate=given)."""
    return "the given rate" if r.get("lr_found") is None else f"{r['lr_factor']:g}x"


def _each(rows: List[dict]) -> str:
    return "; ".join(f"{_label(r)} {_time(r)}{_fate(r)}" for r in rows)


def _margin(own: dict, others: List[dict]) -> str:
    """How much sooner the suggestion reached the target than the next candidate (none when none did)."""
    reached = [r for r in others if r["time_to_target_s"]]
    if not own["time_to_target_s"] or not reached:
        return ""
    nxt = min(reached, key=lambda r: r["time_to_target_s"])
    return f", {nxt['time_to_target_s'] / own['time_to_target_s']:.2f}x sooner than the next ({_label(nxt)})"


def _commit(best: dict) -> str:
    """What to commit for the winning candidate."""
    if best.get("lr_found") is None:
        return "keep the project's optimizer.lr"
    group = best["swept"].get(CANDIDATE)
    return f"commit optimizer.lr={best['lr_found']:.3g}" + (f" (or +{CANDIDATE}={group})" if group else
                                                            f" or {FACTOR}={best['lr_factor']:g}")


def suggestion_lines(result) -> List[str]:
    """The header line on the suggestion against its multiples and the given rate (``+sweep=lr``); none for
    other sweeps."""
    if not (CANDIDATE in result.columns or FACTOR in result.columns):
        return []
    rows = [r for r in result.rows if r.get("lr_found") is not None or r["swept"].get(CANDIDATE) == "given"]
    own = next((r for r in rows if r.get("lr_found") is not None and r.get("lr_factor") == 1.0), None)
    if own is None:
        return []
    rule, rate = own.get("lr_rule") or "range test", own["lr_found"]
    others = [r for r in rows if r is not own]
    head = f"- learning rate: the range test's suggestion ({rule}, {rate:.3g})"
    if result.best is own:
        return [f"{head} won: {_time(own)}{_margin(own, others)}; {_each(others)}: {_commit(own)}"]
    if own.get("tie"):  # the tied candidates, then the rest: "either rate" is said of the tie alone
        tied, rest = [r for r in others if r.get("tie")], [r for r in others if not r.get("tie")]
        either = "either rate" if len(tied) == 1 else "any of these rates"
        return [f"{head} tied with {', '.join(_label(r) for r in tied)}: {_time(own)}; {_each(tied)}: "
                f"{either}" + (f"; {_each(rest)}" if rest else "")]
    best = result.best
    if best is None or best not in rows:
        return [f"{head}: {_time(own)}{_fate(own)}; {_each(others)}; no winner"]
    sooner = (f", {own['time_to_target_s'] / best['time_to_target_s']:.2f}x sooner" if own["time_to_target_s"]
              and best["time_to_target_s"] else "")
    name = "the given rate" if best.get("lr_found") is None else f"{_label(best)} the suggestion ({best['lr_found']:.3g})"
    return [f"- learning rate: {name} won, {_time(best)} against the suggestion's {_time(own)}{sooner}{_fate(own)}: "
            f"{_commit(best)}"]
