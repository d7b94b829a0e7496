"""The baseline job and each job against it: speed-ups and parity.

- Baseline: the job with the first listed value of every swept key (Hydra's BasicSweeper runs the
  cartesian product in that order, so it is normally job 0), or the job ``report.baseline`` names.
- Parity: each job's task names its primary held-out metric and its direction (accuracy, higher is
  better; an LM's loss, lower is better). A job whose primary metric is worse than the baseline's by
  more than ``report.parity_tol`` (absolute, in the metric's own units) is ``FAIL``ed and never
  chosen. A missing metric (dataset=synthetic, a failed baseline) gives ``n/a``, which does not
  disqualify: there is nothing to compare. A baseline that did not finish gives no speed-ups.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional

from fastpipe.errors import ConfigError
from fastpipe.measure.noise import parity
from fastpipe.record.overrides import override_key
from fastpipe.report.sweep_folder import Job, SweepSpec, unquote
from fastpipe.report.rows import FINISHED


def first_values(spec: SweepSpec) -> List[str]:
    """``key=first value`` of every swept key, combined as Hydra's BasicSweeper combines them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    lines = [f"{k}={v}" for k, v in spec.params.items()] + list(spec.task_overrides)
    try:
        parsed = OverridesParser.create().parse_overrides(lines)
    except Exception:  # e.g. glob() needs Hydra's config loader: fall back to the lowest job
        return []
    final: Dict[str, Optional[str]] = {}
    for o in parsed:  # a later plain override of the same key replaces a sweep, as in the sweeper
        sweep = o.is_sweep_override() and o.is_discrete_sweep()
        final[o.get_key_element()] = next(iter(o.sweep_string_iterator())) if sweep else None
    return [f"{k}={v}" for k, v in final.items() if v is not None]


def parse_baseline(text: str) -> Dict[str, str]:
    """``"precision=amp,compile=off"`` (commas or spaces) -> ``{"precision": "amp", "compile": "off"}``."""
    pairs = [p for p in re.split(r"[,\s]+", text.strip()) if p]
    if not pairs or any("=" not in p for p in pairs):
        raise ConfigError(f"report.baseline={text!r}: name the job by its overrides, e.g. "
                          "'report.baseline=\"precision=amp,compile=off\"', or give a job number")
    return {override_key(p): unquote(p.split("=", 1)[1]) for p in pairs}


def pick_baseline(jobs: List[Job], spec: SweepSpec) -> Optional[Job]:
    """The baseline job: ``spec.baseline`` if given, else the first value of every swept key."""
    if not jobs:
        return None
    firsts = first_values(spec)
    default = [j for j in jobs if set(firsts) <= set(j.overrides)] if firsts else jobs[:1]
    if spec.baseline in (None, ""):
        return default[0] if default else None
    text = str(spec.baseline).strip()
    if text.isdigit():
        found = [j for j in jobs if j.num == int(text)]
        if not found:
            raise ConfigError(f"report.baseline={text}: no job {text} in this sweep "
                              f"(jobs {', '.join(str(j.num) for j in jobs)})")
        return found[0]
    wanted = parse_baseline(text)
    matches = [j for j in jobs if all(j.values().get(k) == v for k, v in wanted.items())]
    if not matches:
        raise ConfigError(f"report.baseline={text!r} matches no job of this sweep")
    # Keys the user left out: prefer the job that has the default (first) value for them.
    return sorted(matches, key=lambda j: (j not in default, j.num))[0]


def overlap(a: dict, b: dict) -> bool:
    """Whether two rows' repeated throughputs overlap (min..max); False without repeats."""
    if a.get("throughput_min") is None or b.get("throughput_min") is None:
        return False
    return a["throughput_min"] <= b["throughput_max"] and b["throughput_min"] <= a["throughput_max"]


def compare(rows: List[dict], base: Optional[dict], spec: SweepSpec, notes: List[str]) -> None:
    """Mark ``base`` (the baseline's row) and give every row its speed-up and parity verdict against it;
    ``notes`` gets why there are none."""
    if base is None:
        notes.append("no baseline job found (the first-value job is not in this folder): no speed-ups")
    else:
        base["baseline"] = True
        if base["status"] not in FINISHED:  # a run still going, or one that did not finish: not a baseline
            notes.append(f"the baseline (job {base['job']}) is {base['status']}"
                         f"{' (still going, or its process died)' if base['status'] == 'running' else ''}: "
                         "no speed-ups")
        elif base["throughput"] is None and spec.objective != "time_to_target":
            notes.append(f"the baseline (job {base['job']}) has no throughput ({base['status']}): no speed-ups")
        if base["metric_value"] is None and base["status"] in FINISHED:
            notes.append("the baseline has no held-out metric (dataset=synthetic or not ok): parity is n/a")
    finished = base is not None and base["status"] in FINISHED
    for r in rows:
        if finished and base["throughput"] and r["throughput"] is not None:
            r["speedup"] = r["throughput"] / base["throughput"]
            r["within_noise"] = r is not base and overlap(r, base)
        comparable = finished and base["metric_value"] is not None and r["metric"] == base["metric"]
        base_value = base["metric_value"] if comparable else None
        if r["metric_value"] is not None and base_value is not None:
            r["metric_delta"] = r["metric_value"] - base_value
        r["parity"] = parity(r["metric_value"], base_value, spec.parity_tol, r["higher_is_better"])
        if r is base and r["metric_value"] is not None:
            r["parity"] = "baseline"
