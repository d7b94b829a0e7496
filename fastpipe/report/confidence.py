"""How sure a sweep's ranking is, so that the report never crowns noise (docs/sweeps.md, time-to-target.md).

- One run per job: the ranking is untested against run-to-run noise; the report says so (and how to
  test it), and the winner's best.yaml carries the same warning.
- Throughput with ``report.repeats``: a job whose repeats spread (max - min) / median more than
  ``report.max_spread`` is unstable; a job is only faster than another where their repeats do not
  overlap. An unstable winner, or one whose repeats overlap another job's, is not named: the header
  says which jobs it cannot tell apart, and names every unstable job. A job with no rival (every other
  one failed or lost parity) is crowned whatever its spread: it is the only choice, not a speed claim.
- Time to target over seeds (``report.repeats``: repeat k of every job trained with ``seed + k``, a
  paired design; a race's rounds likewise): the race's rank test (fastpipe/sweeps/race/stats.py) on
  the jobs' times per seed. A winner is named when it is separated from every other job at
  ``ALPHA``; otherwise the jobs it cannot be told from are a tie.
- A race (``race.json``): the race's own verdict, winner or tie set.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional

ALPHA = 0.05  # the significance level of the test over report.repeats' seeds (a race names its own)
WINNABLE = ("ok", "unmeasured")


@dataclass
class Confidence:
    """The ranking's verdict: ``separated`` (a winner the measurements support), ``untested`` (one run per
    job), ``tie`` (jobs the measurements cannot tell apart), ``unstable`` (the leader's repeats spread too
    wide), or ``none`` (nothing to rank)."""

    kind: str
    lines: List[str] = field(default_factory=list)  # report.md's header lines
    tie: List[int] = field(default_factory=list)  # the jobs that cannot be told apart, the leader first
    unstable: List[int] = field(default_factory=list)  # jobs whose repeats spread beyond report.max_spread

    @property
    def crowns(self) -> bool:
        """Whether the report may name the leader the winner (and write best.yaml)."""
        return self.kind in ("separated", "untested")


def spread(r: dict) -> Optional[float]:
    """(max - min) / median of a row's repeated throughputs; None with one run."""
    if r.get("repeats", 1) < 2 or r.get("throughput_min") is None or not r.get("throughput"):
        return None
    return (r["throughput_max"] - r["throughput_min"]) / r["throughput"]


def throughput(rows: List[dict], best: Optional[dict], max_spread: float) -> Confidence:
    """The verdict on a throughput ranking (module docstring), and a line naming every unstable job: a
    row's flag alone is easy to miss when the leader is steady (issue 33)."""
    unstable = sorted(r["job"] for r in rows if (spread(r) or 0.0) > max_spread)
    verdict = _throughput_verdict(rows, best, max_spread, unstable)
    verdict.lines += _unstable_lines(rows, unstable, max_spread)
    return verdict


def _unstable_lines(rows: List[dict], unstable: List[int], max_spread: float) -> List[str]:
    if not unstable:
        return []
    spreads = {r["job"]: spread(r) for r in rows}
    jobs = ", ".join(f"{j} ({100 * spreads[j]:.0f} %)" for j in unstable)
    return [f"- unstable: job{'s' if len(unstable) > 1 else ''} {jobs}: repeats spread (max - min over the median) "
            f"more than report.max_spread={max_spread:g}: their samples/s are rough (longer runs or a quieter "
            "machine narrow them)"]


def _throughput_verdict(rows: List[dict], best: Optional[dict], max_spread: float, unstable: List[int]) -> Confidence:
    if best is None:
        return Confidence("none", unstable=unstable)
    if best.get("repeats", 1) < 2:
        return Confidence("untested", [
            "- noise: one run per job: this ranking is untested against run-to-run noise (compare the step times "
            "in the table; report.repeats=3 measures each job's spread and tells the jobs apart only where their "
            "repeats do not overlap)"], unstable=unstable)
    rivals = [r for r in rows if r is not best and r["status"] == "ok" and r["throughput"] is not None
              and r["parity"] != "FAIL"]
    overlapping = [r["job"] for r in rivals if r.get("throughput_max") is not None
                   and r["throughput_max"] >= best["throughput_min"]]
    n = best["repeats"]
    if not rivals:  # crowned whatever its spread: the choice is the only job that qualified, not a speed
        rough = (f" (crowned whatever its spread; its own {n} repeats spread {100 * spread(best):.0f} %, so its "
                 "samples/s is rough)" if best["job"] in unstable else "")
        return Confidence("separated", [f"- noise: job {best['job']} is the only job that could win: nothing to rank "
                                        f"it against{rough}"], unstable=unstable)
    if best["job"] in unstable:
        return Confidence("unstable", [
            f"- noise: UNSTABLE: job {best['job']}'s {n} repeats spread {100 * spread(best):.0f} % (max - min over the "
            f"median; report.max_spread={max_spread:g}): its throughput is not measured well enough to rank, so no "
            "winner is named (longer runs or more measure windows steady it)"],
            [best["job"]] + overlapping if overlapping else [], unstable)  # "(tie)" only beside another job
    if overlapping:
        return Confidence("tie", [
            f"- tie: jobs {', '.join(map(str, [best['job']] + overlapping))}: their repeats overlap (job "
            f"{best['job']}: {best['throughput_min']:,.1f}-{best['throughput_max']:,.1f} samples/s over {n} repeats), so "
            "none is faster than the others and no winner is named"], [best["job"]] + overlapping, unstable)
    return Confidence("separated", [
        f"- noise: job {best['job']}'s {n} repeats ({best['throughput_min']:,.1f}-{best['throughput_max']:,.1f} samples/s) "
        "lie above every other job's: the winner is separated from run-to-run noise"], unstable=unstable)


def target(rows: List[dict], best: Optional[dict]) -> Confidence:
    """The verdict on a time-to-target ranking of grid or halving jobs (module docstring)."""
    from fastpipe.sweeps.race.stats import step_down

    if best is None:
        return Confidence("none")
    runs = len(best.get("target_runs") or [])
    if runs < 2:
        return Confidence("untested", [
            "- noise: the ranking rests on one run per job, untested against run-to-run noise (the seed, kernel "
            "choices and loader timing move a time to target by many steps); race the leaders over seeds to tell "
            "them apart: hydra/sweeper=race (docs/time-to-target.md#racing)"])
    field_ = [r for r in rows if r["status"] in WINNABLE and len(r.get("target_runs") or []) == runs]
    times = {r["job"]: [math.inf if t is None else t for t in r["target_runs"]] for r in field_}
    if len(times) < 2:
        return Confidence("separated", [f"- noise: job {best['job']} is the only job with {runs} runs to rank"])
    steps = list(step_down(times, ALPHA))  # the race's own test, so both name the same winner or tie
    verdict, out = steps[-1][0], {j for _, sent in steps for j in sent}
    others = [j for j in times if j != best["job"]]
    before = sorted(j for _, sent in steps[:-1] for j in sent)  # sent out by the earlier tests
    how = _test_text(verdict, runs) + (f", after job(s) {', '.join(map(str, before))} were found slower"
                                       if before else "")
    if verdict.leader == best["job"] and out == set(others):
        return Confidence("separated", [f"- winner: job {best['job']}, separated from every other job at alpha "
                                        f"{ALPHA:g} after {runs} seeds ({how})"])
    tied = [best["job"]] + [j for j in others if j not in out]
    few = (" (an exact paired test needs at least 5 seeds to separate two jobs at 0.05: raise report.repeats, or "
           "race them: hydra/sweeper=race)" if runs < 5 else "")
    return Confidence("tie", [f"- tie: jobs {', '.join(map(str, tied))} ({runs} seeds): not separated at alpha "
                              f"{ALPHA:g} ({how}){few}; no winner is named"], tied)


def _test_text(verdict, runs: int) -> str:
    from fastpipe.sweeps.race.stats import p_text

    if verdict.test == "wilcoxon":
        (p,) = [v["p"] for v in verdict.posthoc.values()]
        return f"one-sided Wilcoxon signed-rank test of the paired ranks, {p_text(p)}"
    f = verdict.friedman
    text = f"Friedman test over {runs} seeds, {p_text(f['p'])}"
    if verdict.posthoc:
        worst = max(v["p_holm"] for j, v in verdict.posthoc.items() if j in verdict.worse) if verdict.worse else None
        text += ("; Conover's post-hoc against the leader, Holm-corrected" +
                 (f", largest p among the separated {worst:.3g}" if worst is not None else ""))
    return text


def race(record, rows: List[dict]) -> Confidence:
    """The verdict of a race (``race.json``): its winner, or its tie set."""
    alpha, seeds = record.settings.get("alpha", ALPHA), len(record.rounds)
    if record.stopped_by is None:
        return Confidence("tie", [f"- race: still running or stopped after {seeds} round(s): no verdict yet "
                                  "(sweep.resume=true continues it)"], list(record.survivors or record.entrants))
    if record.winner is not None:
        failed = [n for n, e in record.eliminated.items() if e.get("p") is None]
        tail = f"; job(s) {', '.join(failed)} failed" if failed else ""
        return Confidence("separated", [f"- winner: job {record.winner}, separated from every other job at alpha "
                                        f"{alpha:g} after {seeds} seeds{tail}"])
    if not record.tie:
        return Confidence("none", ["- race: every job failed: no winner"])
    why = {"max_rounds": "max_rounds reached", "max_wall_s": "max_wall_s reached"}.get(record.stopped_by,
                                                                                       record.stopped_by)
    return Confidence("tie", [f"- tie: jobs {', '.join(map(str, record.tie))} ({seeds} seeds; {why}): not separated "
                              f"at alpha {alpha:g}; ranked by median time, no winner is named"], list(record.tie))
