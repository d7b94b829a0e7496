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

    def fake_launch(settings, run_dir):  # stands in for fastpipe.launch.dispatch.launch
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


def test_sweep_resume_keeps_finished_repeats_and_continues_the_stopped_one(tmp_path, capsys):
    """A job of report.repeats=3 stopped by a signal during repeat 1: under sweep.resume repeat 0 (ok,
    the job's overrides) is kept, repeat 1 continues from its checkpoints, repeat 2 starts afresh, and
    the job's record combines the three. Without sweep.resume every repeat launches as given."""
    overrides = ["optimizer.lr=0.01", "report.repeats=3"]
    (tmp_path / "repeat-0").mkdir()
    (tmp_path / "repeat-0" / "metrics.json").write_text(json.dumps(metrics(90.0, overrides=overrides)))
    (tmp_path / "repeat-1" / "checkpoints").mkdir(parents=True)
    (tmp_path / "metrics.json").write_text(json.dumps(metrics(None, status="preempted")))  # the job's, stopped
    calls = []

    def fake_launch(settings, run_dir):
        calls.append((run_dir.name, settings.train.resume))
        return metrics(100.0 + len(calls), overrides=overrides)

    settings = SimpleNamespace(report=SimpleNamespace(repeats=3), overrides=overrides + ["sweep.resume=true"],
                               train=SimpleNamespace(resume=None))
    out = launch_repeats(fake_launch, settings, tmp_path, resume=True)
    assert calls == [("repeat-1", "auto"), ("repeat-2", None)] and settings.train.resume is None
    assert f"{tmp_path / 'repeat-0'} finished ok earlier; kept" in capsys.readouterr().out
    assert out["status"] == "ok" and out["repeats"]["throughput"] == [90.0, 101.0, 102.0]
    assert json.loads((tmp_path / "metrics.json").read_text())["throughput"] == 101.0  # the median repeat

    (tmp_path / "repeat-0" / "metrics.json").write_text(json.dumps(metrics(90.0, overrides=["optimizer.lr=0.1"])))
    calls.clear()
    launch_repeats(fake_launch, settings, tmp_path, resume=True)  # another combination's repeat: trained again
    assert calls == [("repeat-0", None), ("repeat-1", "auto"), ("repeat-2", None)]
    calls.clear()
    launch_repeats(fake_launch, settings, tmp_path)  # no sweep.resume: every repeat as the command says
    assert calls == [("repeat-0", None), ("repeat-1", None), ("repeat-2", None)]


def test_sweep_resume_of_real_repeats_continues_the_stopped_one_from_its_checkpoint(tmp_path):
    """Real in-process launches: repeat 0 finished, repeat 1 stopped at step 7 with checkpoints (here by
    train.max_steps, as a signal would leave it). The resumed job keeps repeat 0 and trains repeat 1
    from its checkpoint to the end, where before it refused: 'holds checkpoints of an earlier run'."""
    from conftest import RESUMABLE, RESUMABLE_TOTAL, make_settings
    from fastpipe.launch.dispatch import launch

    job = RESUMABLE + [f"train.max_steps={RESUMABLE_TOTAL}", "report.repeats=2", "launcher.fresh_process=false"]
    first = launch(make_settings(job), tmp_path / "repeat-0")
    stopped = launch(make_settings(job + ["train.max_steps=7"]), tmp_path / "repeat-1")
    assert first["status"] == stopped["status"] == "ok" and stopped["steps"] == 7
    out = launch_repeats(launch, make_settings(job), tmp_path, resume=True)
    assert out["status"] == "ok", out.get("reason")
    again = json.loads((tmp_path / "repeat-1" / "metrics.json").read_text())
    assert again["steps"] == RESUMABLE_TOTAL and again["per_rank"]["steps_run"] == [RESUMABLE_TOTAL - 7]
    assert json.loads((tmp_path / "repeat-0" / "metrics.json").read_text())["run_id"] == first["run_id"]  # kept
    assert out["repeats"]["n"] == 2 and out["repeats"]["throughput"][0] == first["throughput"]
