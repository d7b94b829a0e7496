"""The statistics of a race: which configurations are slower than another beyond the noise, with the
race's ``alpha`` held over all its looks and all its pairs (docs/time-to-target.md#how-a-race-decides).

Every surviving configuration trains once per seed, so the seeds pair the runs. For two
configurations i and j, a seed where i reached the target sooner than j (or reached it where j
missed) is a win of i over j; a seed where both missed, or both took the same time, is a tie and is
dropped: it says nothing about which is sooner. If i and j are the same, each untied seed is a fair
coin, so i's wins over n untied seeds are Binomial(n, 1/2): the exact two-sided sign test.

j leaves the race when some survivor beat it so often that the sign test's two-sided p is at most the
race's per-look ``level``. The level is chosen so that a race that looks after every seed, up to its
last, and compares every pair of its entrants, sends out a configuration no worse than the best with
a chance of at most ``alpha``:

- over the looks, a constant level at every look (Pocock's design), the largest for which a fair
  sign walk of ``seeds`` steps crosses the boundary at any step with a chance of at most the pair's
  share; that chance is computed exactly, by a dynamic program over the walk (``crossing``);
- over the pairs, Bonferroni: each of the K(K-1)/2 pairs of the K entrants gets ``alpha`` / pairs.

A test of one pair uses that pair's runs only, so configurations that are clearly worse, or never
reach the target, cannot make two close ones look different (Friedman's and Conover's rank tests,
used before, pooled them). A worse configuration is less likely than an equal one to beat the best,
so the same bound holds for every configuration no worse than the best, whatever the others are. A
race of identical configurations names a winner only after an elimination, so at most ``alpha`` of
them name one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Dict, List, Optional

METHOD = ("two-sided sign test of each pair's seeds, at a constant level over every look up to the last "
          "(Pocock) with Bonferroni over the pairs")


def p_text(p: float) -> str:
    """A p value as a report says it: ``p = 0.031``, or ``p < 0.001``."""
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


def pairs_of(configurations: int) -> int:
    """The pairs a race of ``configurations`` entrants compares: K(K-1)/2."""
    return max(1, configurations * (configurations - 1) // 2)


@lru_cache(maxsize=None)
def sign_p(wins: int, n: int) -> float:
    """The exact two-sided p of ``wins`` of ``n`` untied seeds under a fair coin (1.0 for n = 0)."""
    if n == 0:
        return 1.0
    w = max(wins, n - wins)
    tail = sum(math.comb(n, i) for i in range(w, n + 1)) / 2 ** n
    return min(1.0, 2.0 * tail)


@lru_cache(maxsize=None)
def crossing(level: float, seeds: int) -> float:
    """The exact chance that a fair sign walk reaches ``sign_p <= level`` at any of its first ``seeds``
    untied steps (a dynamic program over the wins so far of the paths not yet stopped)."""
    alive = {0: 1.0}  # wins -> probability, among paths that have not crossed
    crossed = 0.0
    for n in range(1, seeds + 1):
        step: Dict[int, float] = {}
        for w, prob in alive.items():
            for nw in (w, w + 1):
                step[nw] = step.get(nw, 0.0) + prob / 2
        alive = {}
        for w, prob in step.items():
            if sign_p(w, n) <= level:
                crossed += prob
            else:
                alive[w] = prob
    return crossed


@lru_cache(maxsize=None)
def level(alpha: float, pairs: int, seeds: int, sequential: bool = True) -> float:
    """The per-look two-sided level of the sign test (module docstring): ``alpha`` / ``pairs`` for one
    look at up to ``seeds`` seeds; for a look after every seed up to ``seeds``, the largest level whose
    chance of a crossing at any look is within ``alpha`` / ``pairs``."""
    share = alpha / pairs
    if not sequential:
        return share
    candidates = sorted({sign_p(w, n) for n in range(1, seeds + 1) for w in range(n + 1)})
    low, high = 0, len(candidates)  # crossing() grows with the level: the last candidate that fits, by bisection
    while low < high:
        mid = (low + high) // 2
        if crossing(candidates[mid], seeds) <= share:
            low = mid + 1
        else:
            high = mid
    return candidates[low - 1] if low else 0.0


def fewest_seeds(alpha: float, pairs: int, seeds: int, sequential: bool = True) -> Optional[int]:
    """The fewest untied seeds at which one configuration winning every one can send another out (None:
    not within ``seeds``)."""
    bound = level(alpha, pairs, seeds, sequential)
    return next((n for n in range(1, seeds + 1) if sign_p(n, n) <= bound), None)


@dataclass
class Verdict:
    """One look at the survivors: who leads, who is sent out (and by whom), at which level."""

    leader: int
    level: float
    out: Dict[int, dict] = field(default_factory=dict)  # job -> {by, wins, losses, p}
    pairs: Dict[str, dict] = field(default_factory=dict)  # "i-j" -> {wins, losses, p}: every pair looked at


def wins_matrix(times: Dict[int, List[float]]) -> "np.ndarray":
    """wins[a, b]: the seeds where ``sorted(times)[a]`` was sooner than ``sorted(times)[b]`` (times; ``inf`` =
    a miss): a seed where both took the same time, or both missed, is a win of neither."""
    import numpy as np

    matrix = np.array([times[j] for j in sorted(times)], dtype=float)  # rows: jobs, columns: seeds
    return (matrix[:, None, :] < matrix[None, :, :]).sum(axis=2)


def ranking(times: Dict[int, List[float]], won=None) -> List[int]:
    """The jobs of ``times`` (each one's per-seed times, ``inf`` = a miss, the same seeds in the same
    order) from the leader down: most pairwise wins, then the median time, then the number. ``won``:
    ``wins_matrix(times)``, when the caller has it."""
    jobs = sorted(times)
    wins = (wins_matrix(times) if won is None else won).sum(axis=1)

    def key(a):
        ordered = sorted(times[jobs[a]])
        return (-int(wins[a]), ordered[(len(ordered) - 1) // 2] if ordered else math.inf, jobs[a])

    return [jobs[a] for a in sorted(range(len(jobs)), key=key)]


def judge(times: Dict[int, List[float]], alpha: float, entrants: int, seeds: int,
          sequential: bool = True) -> Verdict:
    """One look (module docstring) at the survivors' per-seed times: each survivor that another beat
    beyond the level is sent out. ``entrants``: the race's configurations at its start (the pairs the
    alpha is shared by); ``seeds``: the most seeds the race may run (its looks). Never sends out all."""
    jobs = sorted(times)
    bound = level(alpha, pairs_of(entrants), seeds, sequential)
    matrix = wins_matrix(times)
    verdict = Verdict(leader=ranking(times, matrix)[0], level=bound)
    won = matrix.tolist()
    for a, i in enumerate(jobs):
        for b in range(a + 1, len(jobs)):
            j, wins, losses = jobs[b], won[a][b], won[b][a]
            p = sign_p(wins, wins + losses)
            verdict.pairs[f"{i}-{j}"] = {"wins": wins, "losses": losses, "p": p}
            if p <= bound and wins != losses:
                better, worse = (i, j) if wins > losses else (j, i)
                if worse not in verdict.out or p < verdict.out[worse]["p"]:
                    verdict.out[worse] = {"by": better, "wins": max(wins, losses), "losses": min(wins, losses), "p": p}
    if len(verdict.out) >= len(jobs):  # a cycle of significant wins: possible in principle, sends no one out
        verdict.out = {}
    return verdict
