"""What each bar of report.png's first panel is: its length and the text after it, which states that
length first (a time to target, or a throughput), then the job's speed-up and what else its row says."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from fastpipe.report.formats import metric_text
from fastpipe.report.time_to_target import spread_text


@dataclass
class Bar:
    value: Optional[float]  # the bar's length; None: no bar, only ``text``
    text: str
    filled: bool = True  # False: an open hatched bar (a target not reached, a pruned probe)
    low: Optional[float] = None  # min..max over repeats (seeds)
    high: Optional[float] = None


def _no_number(r: dict, missing: str) -> Bar:
    if r["status"] == "ok":
        return Bar(None, missing)
    return Bar(None, f"{str(r['status']).upper()}: {r.get('reason') or missing}")


def time_bar(r: dict) -> Bar:
    """A job's time to target: reached (its time, min..max over repeats), not reached (an open bar to the
    clock where its run stopped: "> N s"), or no bar (no target record)."""
    if r.get("target_reached") and r.get("time_to_target_s") is not None:
        t, speed = r["time_to_target_s"], r.get("speedup")
        text = f"{t:,.1f} s" + spread_text(r)
        notes = ["baseline"] if r.get("baseline") else [_ratio(speed, "sooner", "later")] if speed else []
        notes += ["tie"] if r.get("tie") else []
        return Bar(t, _joined(text, notes, r), low=r.get("target_min"), high=r.get("target_max"))
    if r.get("target_seconds") is not None:
        best = metric_text(r.get("target_metric"), r.get("target_best"))
        notes = ["baseline"] if r.get("baseline") else []
        missed = spread_text(r)
        best += f"; {missed[2:-1]}" if missed else ""
        return Bar(r["target_seconds"], _joined(f"> {r['target_seconds']:,.1f} s: not reached (best {best})", notes, r),
                   filled=False)
    return _no_number(r, "n/a: no target record (train.target unset for this job)")


def throughput_bar(r: dict, objective: str) -> Bar:
    """A job's steady-state throughput (min..max over repeats), its speed-up against the baseline, its
    primary metric where it decides or failed parity, a pruned probe's round, the GPU that measured it."""
    if r.get("throughput") is None:
        return _no_number(r, "n/a: no steady-state throughput")
    notes = ["baseline"] if r.get("baseline") else [_ratio(r["speedup"], "the baseline")] if r.get("speedup") else []
    fail = r.get("parity") == "FAIL"
    if objective == "primary_metric" or fail:
        notes.append(f"{r.get('metric')} {metric_text(r.get('metric'), r.get('metric_value'))}" + " FAIL" * fail)
    pruned = r["status"] == "pruned"
    notes += [f"pruned in round {r.get('round')} (probe)"] if pruned else [] if r["status"] == "ok" else [r["status"]]
    notes += [f"GPU {r['gpus']}"] if r.get("gpus") not in (None, "cpu") else []
    repeats = (r.get("repeats") or 1) > 1
    return Bar(r["throughput"], _joined(f"{r['throughput']:,.1f}/s", notes, r), filled=not pruned,
               low=r.get("throughput_min") if repeats else None, high=r.get("throughput_max") if repeats else None)


def _joined(number: str, notes: List[str], r: dict) -> str:
    """The bar's text: its number first, then its notes, ``best`` last (the winner's alone)."""
    return " · ".join([number] + notes + (["best"] if r.get("best") else []))


def _ratio(speedup: float, faster: str, slower: Optional[str] = None) -> str:
    """``1.23x the baseline`` for rates; ``1.50x sooner`` / ``1.50x later`` for times (``slower`` given)."""
    if slower is None or speedup >= 1:
        return f"{speedup:.2f}x {faster}"
    return f"{1 / speedup:.2f}x {slower}"
