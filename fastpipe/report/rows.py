"""One row per job: its status, and the value of every report column (columns.py) read from its folder."""
from __future__ import annotations

from typing import List, Optional

from fastpipe.record.overrides import measured_overrides, override_key
from fastpipe.report.columns import COLUMNS, Source
from fastpipe.report.sweep_folder import Job
from fastpipe.report.time_to_target import target_fields
from fastpipe.report.timing import launcher_info

FINISHED = ("ok", "fallback", "unmeasured")  # job_status of a job that finished (fallback: compile ran eager)


def job_status(metrics: Optional[dict]):
    """(status, reason): ok | failed (or the run's own status) | fallback (compile ran eager) | unmeasured | missing."""
    if metrics is None:
        return "missing", "no metrics.json: the job did not finish (interrupted sweep?)"
    if metrics.get("status") != "ok":  # failed, or another state a run can end in (preempted)
        return str(metrics.get("status") or "failed"), metrics.get("reason") or "unknown"
    if metrics.get("compile_fallback"):
        return "fallback", f"compile fell back to eager: {metrics['compile_fallback']}"
    if metrics.get("throughput") is None:
        return "unmeasured", next(iter(metrics.get("warnings") or []), "no steady-state steps")
    return "ok", None


def swept_columns(jobs: List[Job]) -> List[str]:
    """The keys whose value differs between jobs (overrides' keys first, then group choices)."""
    keys: List[str] = []
    for j in jobs:
        keys += [override_key(o) for o in measured_overrides(j.overrides) if override_key(o) not in keys]
    for j in jobs:
        keys += [k for k in j.values() if k not in keys]
    return [k for k in keys if len({j.values().get(k) for j in jobs}) > 1]


def source(job: Job, clock: str = "training", aggregate: str = "median") -> Source:
    """What ``job``'s row is read from: its status (a pruned probe's own), primary metric and records."""
    m = job.metrics or {}
    status, reason = job_status(job.metrics)
    pruned = job.pruned_round is not None
    if pruned and status == "ok":
        status, reason = "pruned", job.note
    elif pruned:
        reason = f"probe (round {job.pruned_round}): {reason}"
    primary = m.get("primary_metric") or ({"name": "accuracy", "value": m["accuracy"], "higher_is_better": True}
                                          if m.get("accuracy") is not None else {})  # records before 0.2
    if pruned:  # a probe's held-out numbers come from a few steps of training: never compared
        primary = {}
    return Source(job, m, status, reason, primary, launcher_info(job.dir), target_fields(m, clock, aggregate))


def row(job: Job, columns: List[str], clock: str = "training", aggregate: str = "median") -> dict:
    """``job``'s row: every column's value, the swept keys' values (``swept``) and what the report's
    header, the winner, HParams and the plot read besides (its choices, environment, code, target)."""
    s = source(job, clock, aggregate)
    values, m = job.values(), s.metrics
    facts = {"swept": {k: values.get(k, "") for k in columns}, "choices": dict(m.get("choices") or {}),
             "higher_is_better": s.primary.get("higher_is_better", True),
             "val_metrics": None if job.pruned_round is not None else m.get("val_metrics"), "env": m.get("env"),
             "batch_searched": bool(m.get("batch_size_search")), "name": m.get("name"),
             "tags": list(m.get("tags") or []), "code": m.get("code")}
    return {**s.target, **facts, **{c.key: c.value(s) if c.value else None for c in COLUMNS}}
