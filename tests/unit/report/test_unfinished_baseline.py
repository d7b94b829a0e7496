"""A sweep's speed-ups and parity are measured against a baseline job that finished: one still
running (the report of a sweep in progress) or one that failed after measuring itself (its held-out
metric was NaN) gives no speed-ups and says why."""
from __future__ import annotations

from pathlib import Path

import pytest

from fastpipe.report.sweep_folder import Job, SweepSpec
from fastpipe.report.aggregate import aggregate


def job(num: int, status: str, throughput: float, accuracy: float) -> Job:
    metrics = {"status": status, "reason": None if status == "ok" else "the run did not finish: its process died or "
               "is still running", "throughput": throughput, "choices": {"precision": "fp32" if num == 0 else "amp"},
               "primary_metric": {"name": "accuracy", "value": accuracy, "higher_is_better": True}}
    return Job(num, Path(f"/sweep/{num}"), [f"precision={'fp32' if num == 0 else 'amp'}"], metrics)


@pytest.mark.parametrize("status, why", [("running", "running (still going, or its process died)"),
                                         ("failed", "failed")])
def test_a_baseline_that_did_not_finish_gives_no_speed_ups(status, why):
    result = aggregate(Path("/sweep"), [job(0, status, 100.0, 0.9), job(1, "ok", 200.0, 0.9)],
                       SweepSpec(params={"precision": "fp32,amp"}))
    amp = next(r for r in result.rows if r["job"] == 1)
    assert result.baseline["job"] == 0 and amp["speedup"] is None and amp["parity"] == "n/a"
    assert f"the baseline (job 0) is {why}: no speed-ups" in result.notes


def test_a_finished_baseline_gives_speed_ups():
    result = aggregate(Path("/sweep"), [job(0, "ok", 100.0, 0.9), job(1, "ok", 200.0, 0.9)],
                       SweepSpec(params={"precision": "fp32,amp"}))
    assert next(r for r in result.rows if r["job"] == 1)["speedup"] == 2.0
