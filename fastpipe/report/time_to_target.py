"""A sweep ranked by time to target (``report.objective=time_to_target``, docs/time-to-target.md).

- Each row's time is its ``target.seconds`` (``report.target_clock=training``: from the first
  training step) or ``target.seconds_end_to_end`` (``end_to_end``: from the job's start). Rows that
  reached the target come first, soonest first; rows that did not come after, nearest the target
  first, shown as "> N s" (the clock when they ended) with their best value; rows without a target
  record last.
- Speed-up = the baseline's time / the row's; "–" when the baseline did not reach the target. The
  winner is the soonest row that reached it, among those that may win (ok, not a compile fall-back);
  a job too short for a steady-state throughput (``unmeasured``) may still win: it reached the target.
- Over several runs of a job (``report.repeats``, seeds ``seed``, ``seed+1``, ...; a race's rounds)
  the time is their median, or with ``report.aggregate=olympic`` MLPerf's olympic mean (the fastest and
  slowest dropped, the rest averaged; a miss counts as the slowest; two misses: not reached), and the
  spread their min..max. Whether the winner is told apart from the others is confidence.py's question.
"""
from __future__ import annotations

import math
import statistics
from typing import List, Optional

from fastpipe.report.formats import metric_text
from fastpipe.sweeps.objective import shortfall

WINNABLE = ("ok", "unmeasured")  # a reached target needs no steady-state throughput


def aggregate_time(runs: List[Optional[float]], how: str = "median") -> Optional[float]:
    """One time for several runs (None = a miss, slower than every reached run): their median, or the
    olympic mean (module docstring); None when that is a miss."""
    times = sorted(math.inf if t is None else t for t in runs)
    if how == "olympic" and len(times) >= 3:
        if times[-2] == math.inf:  # more than one miss: not reached
            return None
        centre = sum(times[1:-1]) / (len(times) - 2)
    else:
        centre = statistics.median(times) if times else math.inf
    return None if math.isinf(centre) else centre


def target_fields(m: dict, clock: str, aggregate: str = "median") -> dict:
    """A report row's time-to-target fields from a job's metrics.json."""
    t = m.get("target") or {}
    key = "seconds_end_to_end" if clock == "end_to_end" else "seconds"
    seconds, reached = t.get(key), bool(t.get("reached"))
    repeats = t.get("repeats") or {}
    runs = [s if hit else None for s, hit in zip(repeats.get(key) or [], repeats.get("reached") or [])]
    if len(runs) > 1:  # several runs: the sweep's aggregate of them
        combined = aggregate_time(runs, aggregate)
        reached = combined is not None
        seconds = combined if reached else statistics.median(s for s in repeats.get(key) or [] if s is not None)
    elif t:
        runs = [seconds if reached else None]
    spread = [s for s in runs if s is not None]
    return {"target": t.get("value"), "target_metric": t.get("metric"), "target_reached": reached if t else None,
            "time_to_target_s": seconds if reached else None, "target_seconds": seconds,
            "target_steps": t.get("steps"), "target_samples": t.get("samples"), "target_best": t.get("best_value"),
            "target_higher": t.get("higher_is_better", True), "target_eval_every": t.get("eval_every"),
            "target_eval_samples": t.get("eval_samples"),
            "target_screen_risk": t.get("screen_risk", 0.0 if t.get("eval_samples") else None),  # before schema 7: exact
            "target_min": min(spread) if len(spread) > 1 else None, "target_max": max(spread) if len(spread) > 1 else None,
            "target_repeats": len(repeats.get("reached") or []) or 1, "target_times": runs,
            "target_runs": len(runs) if t else None, "target_missed": sum(x is None for x in runs) if t else None,
            "compile_cache": (m.get("compile_cache") or {}).get("state"), "curve": t.get("curve") or []}


def sort_key(r: dict):
    """Reached first (soonest first), then not reached (nearest the target first, as an optimising
    sweeper scores them; then longest tried), then no target at all."""
    if r["target_reached"]:
        return (0, r["time_to_target_s"], 0.0, r["job"])
    if r["target_seconds"] is not None:
        return (1, shortfall(r["target"], r["target_best"], r["target_higher"]), -r["target_seconds"], r["job"])
    return (2, 0.0, 0.0, r["job"])


def rank(rows: List[dict], base: Optional[dict], notes: List[str]) -> Optional[dict]:
    """Speed-ups against the baseline's time, ``parity`` = reached / not reached, and the winner."""
    base_s = base["time_to_target_s"] if base is not None else None
    for r in rows:
        r["speedup"] = base_s / r["time_to_target_s"] if base_s and r["time_to_target_s"] else None
        r["parity"] = "n/a" if r["target_reached"] is None else "reached" if r["target_reached"] else "not reached"
    eligible = sorted((r for r in rows if r["status"] in WINNABLE and r["target_reached"]), key=sort_key)
    if not eligible:
        notes.append("no job reached the target: nothing to rank by time; raise train.epochs / train.max_steps, or "
                     "lower train.target")
        return None
    if base is not None and base_s is None:
        notes.append(f"the baseline (job {base['job']}) did not reach the target: no speed-ups; the jobs are ranked "
                     "among those that did")
    return eligible[0]


def spread_text(r: dict) -> str:
    """What a row's several runs were: `` (58.1-70.2, n=3)`` when every one reached the target, else the range
    of those that did and how many missed: `` (13.7-23.6 of 4 reached; 2 of 6 missed)``; "" for one run."""
    runs, missed = r.get("target_runs") or 0, r.get("target_missed") or 0
    if runs < 2:
        return ""
    reached = runs - missed
    if not missed:
        return f" ({r['target_min']:,.1f}-{r['target_max']:,.1f}, n={runs})"
    span = (f"{r['target_min']:,.1f}-{r['target_max']:,.1f} of {reached} reached; " if r["target_min"] is not None
            else f"{r['time_to_target_s']:,.1f} in the one reached; " if reached == 1 and r["time_to_target_s"] else
            "1 reached; " if reached == 1 else "")
    return f" ({span}{missed} of {runs} missed)"


def time_cell(r: dict) -> str:
    """``63.6``, ``63.6 (58.1-70.2, n=3)`` with repeats, ``23.2 (13.7-23.6 of 4 reached; 2 of 6 missed)``
    when some missed, ``> 120.4 (best 93.1 %)`` when not reached."""
    if r["target_reached"]:
        return f"{r['time_to_target_s']:,.1f}" + spread_text(r)
    if r["target_seconds"] is None:
        return "n/a"
    best = f"best {metric_text(r['target_metric'], r['target_best'])}"
    missed = spread_text(r)
    return f"> {r['target_seconds']:,.1f} ({best}" + (f"; {missed[2:-1]})" if missed else ")")


def header_lines(result, clock: str) -> List[str]:
    """report.md's lines on the target and the clock."""
    rows = [r for r in result.rows if r["target"] is not None]
    if not rows:
        return ["- target: no job recorded one (train.target): nothing to rank by time"]
    r = rows[0]
    sign = ">=" if r["target_higher"] else "<="
    risk = r.get("target_screen_risk")
    subset = (f", screened on {r['target_eval_samples']} held-out samples (seeded; class-balanced where the dataset "
              "exposes its labels" + (f"; a screen ends as a miss at a risk of {risk:g}" if risk else "") +
              ") and confirmed on the whole split" if r["target_eval_samples"] else "")
    what = ("training clock: from the first training step, with compilation, every evaluation and checkpoint"
            if clock == "training" else "end-to-end clock: from the job's start (imports, data, model build, then "
                                        "training)")
    lines = [f"- target: held-out {r['target_metric']} {sign} {metric_text(r['target_metric'], r['target'])} "
             f"(train.target={r['target']:g}), checked every {r['target_eval_every']} steps{subset}; ranked by the "
             f"{what} (report.target_clock={clock}); reached = the first whole-split evaluation at the target"]
    best = result.best or result.candidate
    if best is not None and best["target_reached"]:
        named = best is result.best
        speed = (" (the baseline itself)" if best["baseline"] else
                 f", {best['speedup']:.2f}x sooner than the baseline" if best["speedup"] else "")
        lines.append(f"- {'best' if named else 'leader (no winner named: see below)'}: job {best['job']}: reached the "
                     f"target in {best['time_to_target_s']:,.1f} s{speed}, at step {best['target_steps']} "
                     f"({best['target_samples']:,} samples)" + (" → `best.yaml`" if named else ""))
        fastest = max((x for x in result.rows if x["throughput"] is not None and x["status"] in WINNABLE),
                      key=lambda x: x["throughput"], default=None)
        if fastest is not None and fastest is not best:
            lines.append(f"- throughput ranking: job {fastest['job']} trains fastest per sample "
                         f"({fastest['throughput']:,.1f} samples/s against the {'winner' if named else 'leader'}'s "
                         + (f"{best['throughput']:,.1f}" if best["throughput"] is not None else "n/a: not measured")
                         + ") but reaches the target "
                         + (f"in {fastest['time_to_target_s']:,.1f} s" if fastest["target_reached"] else "not at all")
                         + ": the two rankings disagree")
    return lines
