"""Ctrl-C (SIGINT) once a run's results are written keeps them: the trainer's record stays ok, and
the process that launched it (a sweep's), which gets the same Ctrl-C, does not rewrite it as interrupted."""
from __future__ import annotations

import json

import pytest
from conftest import TINY, run_in_process

from fastpipe.record.results import read as read_metrics


def ctrl_c(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_after_the_summary_keeps_the_results(tmp_path, monkeypatch):
    from fastpipe.job import training

    monkeypatch.setattr(training, "summary_text", ctrl_c)  # the last thing a run does: print its summary
    with pytest.raises(KeyboardInterrupt):
        run_in_process(tmp_path, TINY)
    record = read_metrics(tmp_path)
    assert record["status"] == "ok" and record["steps"] == 12 and record["primary_metric"]["value"] is not None
    assert "interrupted (Ctrl-C) after the results were written; they are kept" in record["warnings"]
    assert (tmp_path / "checkpoints" / "best.pt").is_file() and (tmp_path / "checkpoints" / "last.pt").is_file()

    from fastpipe.__main__ import interrupted

    kept = interrupted(tmp_path, record["choices"], record["overrides"], earlier=None)  # the Hydra process's Ctrl-C
    assert kept == record == read_metrics(tmp_path)


def test_ctrl_c_before_a_job_launched_keeps_an_earlier_runs_results_aside(tmp_path):
    from fastpipe.__main__ import interrupted
    from fastpipe.record import results
    from fastpipe.record.run_record import RunRecord

    earlier = RunRecord.start({"precision": "fp32"}, [], run_id="earlier").set(status="ok", throughput=100.0)
    results.write(tmp_path, earlier)  # an earlier run's results in the reused folder
    record = interrupted(tmp_path, earlier.choices, earlier.overrides, earlier="earlier")
    assert record["status"] == "interrupted" and read_metrics(tmp_path)["status"] == "interrupted"
    kept = json.loads((tmp_path / "metrics.previous.json").read_text())
    assert kept["run_id"] == "earlier" and kept["throughput"] == 100.0  # never reported as this run's, never lost
