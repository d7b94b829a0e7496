"""report.repeats and sweep.resume: repeats combined into one row, and which earlier run counts as finished."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from fastpipe.launch.repeats import combine_repeats, finished_metrics, launch_repeats
from job_metrics import job_metrics as metrics


def test_repeats_median_spread_and_failure(tmp_path):
    runs = [metrics(t, accuracy=a, peak_mem_gb=p) for t, a, p in ((90.0, 0.8, 1.0), (110.0, 0.9, 3.0), (100.0, 0.85, 2.0))]
    m = combine_repeats(runs, ["repeat-0", "repeat-1", "repeat-2"], 3)
    assert m["throughput"] == 100.0 and m["accuracy"] == 0.85 and m["peak_mem_gb"] == 3.0
    assert m["repeats"]["min"] == 90.0 and m["repeats"]["max"] == 110.0 and m["repeats"]["spread"] == pytest.approx(0.2)
    bad = combine_repeats([runs[0], metrics(None, status="failed")], ["repeat-0", "repeat-1"], 3)
    assert bad["status"] == "failed" and bad["reason"] == "repeat 2 of 3: boom"

    calls = []

    def fake_launch(settings, run_dir):  # stands in for fastpipe.launch.launcher.launch
        calls.append(run_dir)
        return metrics(100.0 + len(calls))

    settings = SimpleNamespace(report=SimpleNamespace(repeats=3))
    out = launch_repeats(fake_launch, settings, tmp_path)
    assert calls == [tmp_path / f"repeat-{k}" for k in range(3)]
    assert out["throughput"] == 102.0 and json.loads((tmp_path / "metrics.json").read_text())["repeats"]["n"] == 3


def test_resume_accepts_only_an_ok_run_of_the_same_overrides(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps(metrics(overrides=["precision=amp", "train.lr=0.1"])))
    assert finished_metrics(tmp_path, ["precision=amp", "train.lr=0.1", "sweep.resume=true"]) is not None
    assert finished_metrics(tmp_path, ["precision=fp32", "train.lr=0.1", "sweep.resume=true"]) is None
    (tmp_path / "metrics.json").write_text(json.dumps(metrics(status="failed", overrides=["precision=amp"])))
    assert finished_metrics(tmp_path, ["precision=amp"]) is None
