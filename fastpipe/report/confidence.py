"""How sure a sweep's ranking is, so that the report never crowns noise (docs/sweeps.md, time-to-target.md).

- One run per job, by throughput: a winner only where its lead over the next job is more than twice
  their uncertainty (each run's steady-state windows and ``report.noise_floor``); otherwise too close to
  call. By time to target: never a winner (race them). By the primary metric: named, said untested.
- Throughput with ``report.repeats``: a job whose repeats spread (max - min) / median more than
  ``report.max_spread`` is unstable; a job is only faster than another where their repeats do not
  overlap. An unstable winner, or one whose repeats overlap another job's, is not named: the header
  says which jobs it cannot tell apart, and names every unstable job. A job with no rival (every other
  one failed or lost parity) is crowned whatever its spread: it is the only choice, not a speed claim.
- Time to target over seeds (``report.repeats``: repeat k of every job trained with ``seed + k``, a
  paired design; a race's rounds likewise): the race's pairwise sign test (fastpipe/sweeps/race/stats.py)
  at one look. A winner is named when every other job lost to it beyond the noise at ``ALPHA``;
  otherwise the jobs it cannot be told from are a tie.
- A race (``race.json``): the race's own verdict: winner, last standing (no winner) or tie set.
- An autotune (``autotune.json``): its final configuration, each change it kept having won its own test
  (hydra/sweeper=autotune: fastpipe/sweeps/autotune/climb.py); the lines give the path it took.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional

from fastpipe.measure.noise import uncertainty

ALPHA = 0.05  # the significance level of the test over report.repeats' seeds (a race names its own)
WINNABLE = ("ok", "unmeasured")


@dataclass
class Confidence:
    """The ranking's verdict: ``separated`` (a winner the measurements support), ``untested`` (one run per
    job, too close to call), ``tie`` (jobs the measurements cannot tell apart), ``unstable`` (the leader's
    repeats spread too wide), ``last_standing`` (a race's survivor whose rivals failed), or ``none``
    (nothing to rank). Only ``separated`` names a winner and writes best.yaml."""

    kind: str
    lines: List[str] = field(default_factory=list)  # report.md's header lines
    tie: List[int] = field(default_factory=list)  # the jobs that cannot be told apart, the leader first
    unstable: List[int] = field(default_factory=list)  # jobs whose repeats spread beyond report.max_spread

    @property
    def crowns(self) -> bool:
        """Whether the report may name the leader the winner (and write best.yaml)."""
        return self.kind in ("separated", "metric")


def spread(r: dict) -> Optional[float]:
    """(max - min) / median of a row's repeated throughputs; None with one run."""
    if r.get("repeats", 1) < 2 or r.get("throughput_min") is None or not r.get("throughput"):
        return None
    return (r["throughput_max"] - r["throughput_min"]) / r["throughput"]


def throughput(rows: List[dict], best: Optional[dict], max_spread: float, noise_floor: float = 0.04,
               objective: str = "throughput") -> Confidence:
    """The verdict on a throughput ranking, or on a ranking by the primary metric (``objective``) (module
    docstring), and a line naming every unstable job: a row's flag alone is easy to miss when the leader
    is steady (issue 33)."""
    unstable = sorted(r["job"] for r in rows if (spread(r) or 0.0) > max_spread)
    if best is not None and best.get("repeats", 1) < 2:
        if objective == "primary_metric":  # its metric picked it, not its samples/s: named, and said untested
            return Confidence("metric", [
                "- noise: one run per job: ranked by the held-out metric, untested against run-to-run noise "
                "(report.repeats=3 measures each job's spread)"])
        return one_run(rows, best, noise_floor)
    verdict = _throughput_verdict(rows, best, max_spread, unstable)
    verdict.lines += _unstable_lines(rows, unstable, max_spread)
    return verdict


def one_run(rows: List[dict], best: dict, noise_floor: float) -> Confidence:
    """One run per job, by throughput: the leader is named only when its margin over the next job is more
    than twice their combined uncertainty (``uncertainty``); otherwise too close to call."""
    rivals = [r for r in rows if r is not best and r["status"] == "ok" and r["throughput"] is not None
              and r["parity"] != "FAIL"]
    if not rivals:
        return Confidence("separated", [f"- noise: job {best['job']} is the only job that could win: nothing to rank "
                                        "it against"])
    second = max(rivals, key=lambda r: r["throughput"])
    margin = best["throughput"] / second["throughput"] - 1.0
    both = math.sqrt(uncertainty(best, noise_floor) ** 2 + uncertainty(second, noise_floor) ** 2)
    how = (f"job {best['job']} leads job {second['job']} by {100 * margin:.1f} %; their lead is uncertain by "
           f"±{100 * both:.1f} % (one run each: their steady-state windows and report.noise_floor={noise_floor:g}, the "
           "run-to-run spread)")
    if margin > 2.0 * both:
        return Confidence("separated", [f"- noise: one run per job: {how}, so the lead is more than twice the noise"])
    return Confidence("untested", [
        f"- too close to call: {how}: within twice the noise, so no winner is named and no best.yaml is written; "
        "measure each job's spread with report.repeats=3 (docs/sweeps.md#how-sure-the-ranking-is)"])


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
    from fastpipe.sweeps.race import stats

    if best is None:
        return Confidence("none")
    runs = len(best.get("target_times") or [])
    if runs < 2:
        return Confidence("untested", [
            "- noise: one run per job: no winner is named and no best.yaml is written (the seed, kernel choices and "
            "loader timing move a time to target by many steps); race the leaders over seeds to tell them apart: "
            "hydra/sweeper=race (docs/time-to-target.md#racing)"])
    field_ = [r for r in rows if r["status"] in WINNABLE and len(r.get("target_times") or []) == runs]
    times = {r["job"]: [math.inf if t is None else t for t in r["target_times"]] for r in field_}
    if len(times) < 2:
        return Confidence("separated", [f"- noise: job {best['job']} is the only job with {runs} runs to rank"])
    verdict = stats.judge(times, ALPHA, len(times), runs, sequential=False)
    left = [j for j in times if j not in verdict.out]
    how = (f"two-sided sign test of each pair's {runs} paired seeds, Bonferroni over {stats.pairs_of(len(times))} "
           f"pair(s): p <= {verdict.level:.2g}")
    if left == [best["job"]]:
        return Confidence("separated", [f"- winner: job {best['job']}, sooner than every other job beyond the noise "
                                        f"at alpha {ALPHA:g} ({how})"])
    # the soonest median first, unless a pair's test sent it out (it lost to a job that reaches it less often)
    tied = ([best["job"]] if best["job"] not in verdict.out else []) + [j for j in left if j != best["job"]]
    need = stats.fewest_seeds(ALPHA, stats.pairs_of(len(tied)), 64, sequential=False)
    out = (f"; job {best['job']}, the soonest median, lost to job {verdict.out[best['job']]['by']} seed by seed"
           if best["job"] in verdict.out else "")
    return Confidence("tie", [f"- tie: jobs {', '.join(map(str, tied))} ({runs} seeds): not told apart at alpha "
                              f"{ALPHA:g} ({how}){out}; no winner is named. Next: race them (hydra/sweeper=race over "
                              f"their values), or repeat them over at least {need} seeds (report.repeats)"], tied)


def race(record, rows: List[dict]) -> Confidence:
    """The verdict of a race (``race.json``): its winner, its last standing, or its tie set."""
    verdict = _race_verdict(record)
    if record.older:
        verdict.lines.append("- note: an earlier fastpipe decided this race with other tests (Friedman's with "
                             "Conover's against the leader, a one-sided Wilcoxon test for two), which did not hold "
                             "their alpha over the looks: race the configurations again for a verdict that does")
    return verdict


def _race_verdict(record) -> Confidence:
    alpha, seeds = record.settings.get("alpha", ALPHA), len(record.rounds)
    failed = [f"job {n} in round {e['round']}" for n, e in record.eliminated.items() if e.get("p") is None]
    if record.stopped_by is None:
        return Confidence("tie", [f"- race: still running or stopped after {seeds} round(s): no verdict yet "
                                  "(sweep.resume=true continues it)"], list(record.survivors or record.entrants))
    if record.winner is not None:
        from fastpipe.sweeps.race import stats

        return Confidence("separated", [
            f"- winner: job {record.winner}: every other job was sent out by a two-sided sign test of its paired seeds "
            f"(alpha {alpha:g} over the whole race: {stats.pairs_of(len(record.entrants))} pair(s), a look after "
            f"every seed up to {record.settings.get('max_rounds')}), after {seeds} seeds"])
    if record.last_standing is not None:
        return Confidence("last_standing", [
            f"- last standing: job {record.last_standing}, after {seeds} seeds: the others failed ({', '.join(failed)}) "
            "and it was never tested against them, so no winner is named and no best.yaml is written (--save-best "
            "PATH --force saves it anyway)"])
    if not record.tie:
        return Confidence("none", ["- race: every job failed: no winner"])
    why = {"max_rounds": "max_rounds reached", "max_wall_s": "max_wall_s reached"}.get(record.stopped_by,
                                                                                       record.stopped_by)
    return Confidence("tie", [
        f"- tie: jobs {', '.join(map(str, record.tie))} ({seeds} seeds; {why}): no pair among them differed beyond the "
        f"noise at alpha {alpha:g}; ranked by median time, no winner is named. Next: race them as a new race (a new "
        "hydra.sweep.dir, a larger hydra.sweeper.max_rounds: docs/time-to-target.md gives the seeds a difference "
        "needs), or save the leader anyway: python -m fastpipe.report DIR --save-best PATH --force"],
        list(record.tie))


def autotuned(record: dict) -> Confidence:
    """The verdict of an autotune (``autotune.json``): its final trial, and the path that led there."""
    steps, final, gain = record["steps"], record["final"], record.get("speedup")
    why = {"no_candidate_won": "no candidate won", "max_trials": "hydra.sweeper.max_trials reached",
           "max_wall_s": "hydra.sweeper.max_wall_s reached", "baseline_failed": "the baseline failed"}
    stopped = why.get(record.get("stopped_by"), "still running or stopped (sweep.resume=true continues it)")
    lines = [f"- autotune by {record['objective'].replace('_', ' ')}: {len(record['trials'])} trial(s) in "
             f"{record.get('wall_s', 0):.0f} s; stopped: {stopped}"]
    for step in steps:
        probe = step["probe"]
        tried = "; ".join(_tried(c) for c in step["candidates"]) or "nothing left to try"
        kept = f" -> kept {step['kept']}" if step.get("kept") else ""
        lines.append(f"- probe of job {probe['trial']}: bound by {probe['bound']}"
                     f"{' (memory headroom)' if probe.get('headroom') else ''}: {tried}{kept}")
    changes = [s["kept"] for s in steps if s.get("kept")]
    summary = ""
    if gain:
        spread = f" ({gain['low']:.2f}-{gain['high']:.2f}x from run to run)" if gain.get("low") else ""
        summary = f": {gain['value']:.2f}x the baseline{spread}"
    if record.get("stopped_by") == "baseline_failed":
        return Confidence("none", lines + ["- the project's configuration as given did not finish with a "
                                           "throughput: nothing to climb from (its row says why)"])
    done = (f", {' '.join(changes)}" if changes else ": the project's configuration as given"
            + (", nothing beat it" if record.get("stopped_by") else ""))
    lines.append(f"- {'final' if record.get('stopped_by') else 'best so far'}: job {final['trial']}{done}{summary}")
    # an unfinished climb's best is no result yet: named, not crowned (sweep.resume=true finishes it)
    return Confidence("separated" if record.get("stopped_by") else "untested", lines)


def _tried(candidate: dict) -> str:
    """``compile=default won (1.50x: ...)``: one candidate's outcome."""
    text = (candidate.get("evidence") or {}).get("text")
    return f"{candidate['change']} {candidate['result']}" + (f" ({text})" if text else "")
