"""The statistics of a race (F-Race, Birattari et al. 2002): who is significantly worse than the leader.

Every surviving configuration has trained once per seed; the seeds are the blocks of a paired
design. Within each seed the runs are ranked by time to target (1 = soonest); a run that missed the
target (or was capped) ranks below every run that reached it, and two misses tie (average ranks).

- Three or more survivors: Friedman's test (``scipy.stats.friedmanchisquare``) asks whether any of
  them differ; if it rejects at ``alpha``, Conover's post-hoc test for the Friedman design (the t
  statistic on rank sums with (n-1)(k-1) degrees of freedom, Conover 1999, as F-Race and
  scikit-posthocs' ``posthoc_conover_friedman`` compute it) compares each survivor with the leader,
  Holm-corrected over those comparisons.
- Two survivors: the one-sided Wilcoxon signed-rank test of the paired within-seed ranks
  (``scipy.stats.wilcoxon``, ``zero_method="wilcox"``: a seed where the two tie, both missed or took
  the same time, says nothing about which is sooner and is dropped), exact: every sign assignment is
  enumerated, ties included (up to ``EXACT_MAX`` seeds, the normal approximation beyond).

With fewer than five seeds no exact paired test of two configurations can reach p < 0.05: the
smallest one-sided p of n seeds is 1/2^n (0.0625 at four).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np

EXACT_MAX = 20  # seeds up to which the two-survivor test enumerates all 2^n sign assignments


def p_text(p: float) -> str:
    """A p value as a report says it: ``p = 0.031``, or ``p < 0.001``."""
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


def seed_ranks(values: Sequence[Sequence[float]]) -> np.ndarray:
    """Within-seed ranks of ``values`` (rows: seeds, columns: configurations; a miss is ``inf``):
    1 = the soonest, ties (two misses) share their average rank."""
    from scipy.stats import rankdata

    return np.array([rankdata(row) for row in np.asarray(values, dtype=float)], dtype=float)


def friedman(ranks: np.ndarray) -> Dict[str, float]:
    """Friedman's test over the columns of ``ranks``: ``{statistic, p}``. Runs that agree in every
    seed (a statistic scipy cannot form) are no evidence of a difference: statistic 0, p 1."""
    from scipy.stats import friedmanchisquare

    if len(set(map(tuple, ranks.T.tolist()))) == 1:
        return {"statistic": 0.0, "p": 1.0}
    statistic, p = friedmanchisquare(*ranks.T)
    if not math.isfinite(statistic):
        return {"statistic": 0.0, "p": 1.0}
    return {"statistic": float(statistic), "p": float(p)}


def conover_vs(ranks: np.ndarray, leader: int) -> Dict[int, float]:
    """Conover's two-sided p of each column against column ``leader`` (unadjusted)."""
    from scipy.stats import t as student_t

    n, k = ranks.shape
    sums = ranks.sum(axis=0)
    spread = 2.0 * (n * float((ranks ** 2).sum()) - float((sums ** 2).sum())) / ((n - 1) * (k - 1))
    out = {}
    for j in range(k):
        if j == leader:
            continue
        diff = abs(sums[j] - sums[leader])
        if spread <= 0.0:  # every seed ranked the runs alike: any difference is certain
            out[j] = 0.0 if diff > 0 else 1.0
            continue
        out[j] = float(2.0 * student_t.sf(diff / math.sqrt(spread), df=(n - 1) * (k - 1)))
    return out


def holm(pvalues: Dict[int, float]) -> Dict[int, float]:
    """Holm's step-down adjustment of a family of p values (monotone, capped at 1)."""
    order = sorted(pvalues, key=lambda j: (pvalues[j], j))
    m, running, out = len(order), 0.0, {}
    for i, j in enumerate(order):
        running = max(running, min(1.0, (m - i) * pvalues[j]))
        out[j] = running
    return out


def wilcoxon_worse(ranks: np.ndarray, leader: int, other: int) -> float:
    """One-sided p that ``other`` ranks worse than ``leader`` over the paired seeds (module docstring);
    1.0 when no seed separates them."""
    from scipy.stats import PermutationMethod, wilcoxon

    diffs = ranks[:, other] - ranks[:, leader]
    nonzero = diffs[diffs != 0]
    if len(nonzero) < 2:  # scipy needs two: one seed against leaves p 1/2 (or 1), none p 1
        return 0.5 if len(nonzero) and nonzero[0] > 0 else 1.0
    method = PermutationMethod(n_resamples=np.inf) if np.count_nonzero(diffs) <= EXACT_MAX else "asymptotic"
    return float(wilcoxon(diffs, zero_method="wilcox", alternative="greater", method=method).pvalue)


@dataclass
class Verdict:
    """One round's test over the survivors: who leads, the tests' numbers, who is worse."""

    leader: int
    test: Optional[str]  # "friedman+conover", "wilcoxon", or None (too few survivors or seeds)
    friedman: Optional[Dict[str, float]] = None
    posthoc: Dict[int, Dict[str, float]] = field(default_factory=dict)  # job -> {p, p_holm}
    worse: List[int] = field(default_factory=list)  # significantly worse than the leader: they leave


def median_rank_order(jobs: Sequence[int], ranks: np.ndarray, times: np.ndarray) -> List[int]:
    """``jobs`` from best to worst: median within-seed rank, then rank sum, then median time, then number."""
    def key(i):
        return (float(np.median(ranks[:, i])), float(ranks[:, i].sum()), float(np.median(times[:, i])), jobs[i])

    return [jobs[i] for i in sorted(range(len(jobs)), key=key)]


def ranking(times: Dict[int, List[float]]) -> List[int]:
    """The jobs of ``times`` (each one's per-seed times, ``inf`` = a miss, the same seeds in the same order
    for every job) from the leader down: ``median_rank_order`` of their within-seed ranks."""
    jobs = sorted(times)
    matrix = np.array([times[j] for j in jobs], dtype=float).T  # rows: seeds, columns: jobs
    return median_rank_order(jobs, seed_ranks(matrix), matrix)


def rank_sums(times: Dict[int, List[float]]) -> Dict[int, float]:
    """Each job's sum of within-seed ranks over the seeds (``times`` as ``ranking``)."""
    jobs = sorted(times)
    ranks = seed_ranks(np.array([times[j] for j in jobs], dtype=float).T)
    return dict(zip(jobs, ranks.sum(axis=0).tolist()))


def judge(times: Dict[int, List[float]], alpha: float) -> Verdict:
    """The test of one round (module docstring) over each survivor's per-seed times (as ``ranking``)."""
    jobs = sorted(times)
    matrix = np.array([times[j] for j in jobs], dtype=float).T  # rows: seeds, columns: jobs
    ranks = seed_ranks(matrix)
    order = median_rank_order(jobs, ranks, matrix)
    leader = order[0]
    lead = jobs.index(leader)
    if len(jobs) < 2:
        return Verdict(leader, None)
    if len(jobs) == 2:
        other = order[1]
        p = wilcoxon_worse(ranks, lead, jobs.index(other))
        return Verdict(leader, "wilcoxon", posthoc={other: {"p": p, "p_holm": p}},
                       worse=[other] if p < alpha else [])
    verdict = Verdict(leader, "friedman+conover", friedman=friedman(ranks))
    if verdict.friedman["p"] >= alpha:
        return verdict
    raw = {jobs[i]: p for i, p in conover_vs(ranks, lead).items()}
    adjusted = holm(raw)
    sums = dict(zip(jobs, ranks.sum(axis=0)))
    verdict.posthoc = {j: {"p": raw[j], "p_holm": adjusted[j]} for j in raw}
    verdict.worse = sorted(j for j in raw if adjusted[j] < alpha and sums[j] > sums[leader])
    return verdict


def step_down(times: Dict[int, List[float]], alpha: float):
    """A race round's tests (and a report's over ``report.repeats`` seeds), worst first: (verdict, the jobs
    it sends out) pairs. Of the jobs a test finds
    significantly slower only those with the largest rank sum leave; the rest are tested again
    without them. A close pair is so judged on its own seeds: beside jobs that never reached the
    target every seed ranks the same way, which makes Conover's pooled variance (and its p) tiny for
    any difference between the others."""
    times = dict(times)
    while len(times) >= 2:
        verdict = judge(times, alpha)
        if not verdict.worse:
            yield verdict, []
            return
        sums = rank_sums(times)
        worst = max(sums[n] for n in verdict.worse)
        out = sorted(n for n in verdict.worse if math.isclose(sums[n], worst))
        yield verdict, out
        times = {n: v for n, v in times.items() if n not in out}
