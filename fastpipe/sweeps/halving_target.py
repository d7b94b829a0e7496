"""Successive halving by time to target: ``hydra/sweeper=halving report.objective=time_to_target``.

Every combination but the baseline trains in its own folder (``<sweep>/N/``, where a grid puts it)
until the training clock passes the round's budget (``train.time_budget_s``), then stops cleanly with
a checkpoint. After each round:

- if any combination has reached the target, every one still short of it is dropped: its clock
  already passed the time the other needed, so it cannot win; the sweep ends;
- else the paused ones are ranked by their best primary held-out metric so far (in its direction)
  and the best ``keep`` share goes on (never fewer than ``finalists``; at least one is dropped while
  more are left). A promoted combination resumes from its own last checkpoint in its own folder
  (``train.resume=auto``): no step runs twice and its training clock continues (the restart's
  start-up is not on it; a re-compilation is, unless Inductor's cache served it).

A combination that ends on its own (its run's length, early stopping, a failure) is finished and
leaves the race. The finalists left after the last round train on to the end of their runs.

The budgets: ``hydra.sweeper.budget_s`` is round 1's, and each next round's is ``1/keep`` times the
one before. Without it the baseline trains first, in full, and its time to the target T (or, if it
missed, the training seconds its whole run took) fixes them: the last round's budget is T, each
earlier one ``keep`` times the next: a combination still short of the target at T cannot beat the
baseline, so no round runs longer than the time to beat.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional


def n_kept(alive: int, keep: float, finalists: int) -> int:
    """How many of ``alive`` ranked combinations go on: the ``keep`` share, at least ``finalists``,
    and at least one fewer than ``alive`` while more than ``finalists`` are left."""
    n = max(finalists, math.ceil(alive * keep))
    if alive > finalists:
        n = min(n, alive - 1)
    return min(n, alive)


def rounds_needed(alive: int, keep: float, finalists: int) -> int:
    """Rounds until ``finalists`` or fewer are left, when none of them ends early."""
    rounds = 0
    while alive > finalists:
        alive, rounds = n_kept(alive, keep, finalists), rounds + 1
    return rounds


def budgets(alive: int, keep: float, finalists: int, budget_s: Optional[float] = None,
            reference_s: Optional[float] = None) -> List[float]:
    """Each round's training-clock budget (module docstring): from ``budget_s`` upwards by ``1/keep``,
    or from the baseline's ``reference_s`` downwards by ``keep``. At least one round."""
    rounds = max(1, rounds_needed(alive, keep, finalists))
    if budget_s is not None:
        return [budget_s / keep ** r for r in range(rounds)]
    return [reference_s * keep ** (rounds - 1 - r) for r in range(rounds)]


def reached(metrics: Optional[dict]) -> bool:
    return isinstance(metrics, dict) and metrics.get("status") == "ok" and bool((metrics.get("target") or {}).get("reached"))


def paused(metrics: Optional[dict]) -> bool:
    """Stopped by the round's budget, short of the target: it may go on."""
    return (isinstance(metrics, dict) and metrics.get("status") == "ok" and metrics.get("stopped_by") == "time_budget"
            and not reached(metrics))


@dataclass
class TargetRound:
    kept: List[int]  # paused, among the best: resume in the next round
    dropped: List[int]  # paused, not among the best (or slower than one that reached): status pruned
    reached: List[int]  # reached the target this round: finished
    finished: List[int]  # ended on their own without reaching it (run length, early stop): finished
    failed: List[int]  # not ok: their own status
    values: Dict[str, Optional[float]]  # each one's best primary metric so far
    cutoff: Optional[float]  # the worst kept value
    done: bool  # someone reached the target: nobody still short of it can win


def judge(results: Dict[int, Optional[dict]], keep: float, finalists: int, higher_is_better: bool,
          any_reached_before: bool = False) -> TargetRound:
    """One round's outcome from each combination's metrics.json."""
    def value(m):  # the best evaluation so far (the target record's), else the last one's
        best = ((m or {}).get("target") or {}).get("best_value")
        return best if best is not None else ((m or {}).get("primary_metric") or {}).get("value")

    values = {str(n): value(m) for n, m in results.items()}
    hit = sorted(n for n, m in results.items() if reached(m))
    waiting = [n for n, m in results.items() if paused(m)]
    failed = sorted(n for n, m in results.items() if not isinstance(m, dict) or m.get("status") != "ok")
    finished = sorted(n for n in results if n not in hit and n not in waiting and n not in failed)
    if hit or any_reached_before:
        return TargetRound([], sorted(waiting), hit, finished, failed, values, None, True)
    sign = 1.0 if higher_is_better else -1.0
    order = sorted(waiting, key=lambda n: (value(results[n]) is None, -sign * (value(results[n]) or 0.0), n))
    k = n_kept(len(order), keep, finalists)
    kept = order[:k]
    return TargetRound(kept, order[k:], hit, finished, failed, values,
                       value(results[kept[-1]]) if kept else None, False)
