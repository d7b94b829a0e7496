"""A sweep's report, aggregated: its rows (rows.py), the baseline and each job against it
(baseline.py), and the winner. Pure logic (no files written here); ``publish.write_report`` hands the
result to the writers in tables.py, plots.py, hparams.py and winner.py.

- Best: the fastest job with status ok (no compile fall-back) whose parity did not fail; with
  ``report.objective=primary_metric``, the one with the best primary metric (ties: the faster); with
  ``report.objective=time_to_target``, the soonest to reach the target (target.py).
- Halving sweeps (``halving.json`` in the folder): what the rounds did and saved: report/timing.py.
- Jobs run by the ``gpus`` launcher carry its ``launcher.json``: the GPUs and cores that measured them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from fastpipe.report import confidence
from fastpipe.report import time_to_target as to_target
from fastpipe.report.confidence import Confidence
from fastpipe.report.baseline import compare, pick_baseline
from fastpipe.report.sweep_folder import Job, SweepSpec
from fastpipe.report.rows import row, swept_columns


@dataclass
class SweepResult:
    sweep_dir: Path
    spec: SweepSpec
    rows: List[dict]  # sorted: fastest first, rows without a throughput last
    columns: List[str]  # the swept keys
    baseline: Optional[dict]
    best: Optional[dict]  # the winner the measurements support; None on a tie or an unstable leader
    notes: List[str]
    halving: Optional[dict] = None  # halving sweeps: rounds and times (fastpipe/report/timing.py)
    confidence: Confidence = field(default_factory=lambda: Confidence("none"))  # how sure the ranking is
    candidate: Optional[dict] = None  # the leader when no winner is named (--save-best --force writes it)
    race: Optional[object] = None  # a race's record (fastpipe/sweeps/race/rounds.py), for its rounds and panel


def pick_best(rows: List[dict], objective: str = "throughput") -> Optional[dict]:
    """The fastest row with status ok whose primary metric held (parity not FAIL); with
    ``objective="primary_metric"`` the row with the best primary metric (in its direction), the faster
    one on a tie, among those that have one."""
    eligible = [r for r in rows if r["status"] == "ok" and r["parity"] != "FAIL" and r["throughput"] is not None]
    if objective == "primary_metric":
        scored = [r for r in eligible if r["metric_value"] is not None]
        if scored:
            return max(scored, key=lambda r: (r["metric_value"] if r["higher_is_better"] else -r["metric_value"],
                                              r["throughput"]))
    return max(eligible, key=lambda r: r["throughput"]) if eligible else None


def aggregate(sweep_dir: Path, jobs: List[Job], spec: SweepSpec) -> SweepResult:
    """Rows with speed-ups and parity verdicts, the baseline row, the leader and how sure the ranking is."""
    from fastpipe.report.timing import summarize
    from fastpipe.sweeps.autotune import record as autotune
    from fastpipe.sweeps.race import rounds
    from fastpipe.sweeps.halving.plan import read

    tuned = autotune.read(sweep_dir)
    raced = None if tuned is not None else rounds.read(sweep_dir)  # an autotune's races are its trials
    columns = swept_columns(jobs)
    rows = [row(j, columns, spec.target_clock, spec.aggregate) for j in jobs]
    base_job, notes = (jobs[0] if tuned is not None and jobs else pick_baseline(jobs, spec)), []  # an autotune's: job 0
    base = next((r for r in rows if base_job is not None and r["job"] == base_job.num), None)
    compare(rows, base, spec, notes)
    if spec.objective == "time_to_target":
        best = to_target.rank(rows, base, notes)
        if raced is not None:
            best, verdict = race_leader(raced, rows) or best, confidence.race(raced, rows)
        else:
            verdict = confidence.target(rows, best)
    else:
        best = pick_best(rows, spec.objective)
        if best is None:
            notes.append("no job qualifies as best (none is ok with its primary metric held)")
        verdict = confidence.throughput(rows, best, spec.max_spread, spec.noise_floor, spec.objective)
    if tuned is not None:  # its final trial, whose every change won its own test
        best = next((r for r in rows if r["job"] == tuned["final"]["trial"]), None)
        verdict = confidence.autotuned(tuned)
    candidate = None
    if best is not None and not verdict.crowns:
        best, candidate = None, best
    for r in rows:
        r["best"], r["tie"], r["unstable"] = r is best, r["job"] in verdict.tie, r["job"] in verdict.unstable
    record = read(sweep_dir)
    halving = summarize(Path(sweep_dir), record, jobs, rows) if record is not None else None
    rows.sort(key=to_target.sort_key if spec.objective == "time_to_target" else
              lambda r: (r["throughput"] is None, -(r["throughput"] or 0.0), r["job"]))
    if raced is not None:
        mark_race(raced, rows)
        rows.sort(key=race_order)
    return SweepResult(Path(sweep_dir), spec, rows, columns, base, best, notes, halving, verdict, candidate, raced)


def race_leader(record, rows: List[dict]) -> Optional[dict]:
    """The race's winner's row, or the best median of its tie set."""
    leader = next((n for n in (record.winner, record.last_standing) if n is not None), (record.tie or [None])[0])
    return next((r for r in rows if r["job"] == leader), None)


def mark_race(record, rows: List[dict]) -> None:
    """Each raced row's outcome: winner, tie, out in round r (p), failed; seeds run."""
    for r in rows:
        if r["job"] not in record.entrants:
            continue
        out = record.eliminated.get(str(r["job"]))
        seeds = sum(r["job"] in rnd["jobs"] for rnd in record.rounds)
        if out is not None:
            r["race"] = {"state": "failed" if out["p"] is None else "out", "round": out["round"], "p": out["p"],
                         "by": out.get("by"), "seeds": seeds}
        else:
            state = ("winner" if record.winner == r["job"] else "last_standing" if record.last_standing == r["job"]
                     else "tie" if r["job"] in (record.tie or []) else "racing")
            r["race"] = {"state": state, "round": None, "p": None, "seeds": seeds}


def race_order(r: dict):
    """Survivors first, then the eliminated by how long they lasted, then the failed; the time within each."""
    race_ = r.get("race")
    if race_ is None:
        return (3, 0, to_target.sort_key(r))
    group = {"winner": 0, "last_standing": 0, "tie": 0, "racing": 0, "out": 1, "failed": 2}[race_["state"]]
    return (group, -(race_["round"] or 0), to_target.sort_key(r))
