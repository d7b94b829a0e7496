"""benchmarks/lib/eval_costs.py: each evaluation's cost from a time-to-target run's curve."""
from __future__ import annotations

import io
import json
import tarfile

import pytest
from conftest import load_benchmark_lib


def _eval_costs():
    return load_benchmark_lib("eval_costs")


def metrics():
    """Steps of 50 ms; screens every 10 steps: a whole one (0.1 s), one ended early (0.04 s) and a whole
    one that hit (0.1 s), confirmed on the whole split in 0.3 s; 0.2 s of one-off costs in eval."""
    curve = [{"step": 10, "seconds": 1.0, "value": 0.2, "subset": True},
             {"step": 20, "seconds": 1.54, "value": 0.1, "subset": True, "evaluated": 512},
             {"step": 30, "seconds": 2.14, "value": 0.95, "subset": True},
             {"step": 30, "seconds": 2.44, "value": 0.94, "subset": False}]
    return {"batch_size": 256, "step_time_ms": {"median": 50.0}, "target": {"curve": curve},
            "time_breakdown_s": {"eval": 0.1 + 0.04 + 0.1 + 0.3 + 0.2, "train": 15.0}}


def test_screens_the_whole_split_and_the_rest_come_from_the_curve():
    c = _eval_costs().costs(metrics())
    assert c["screens"] == 3 and c["ended"] == 1 and c["samples"] == [512]
    assert c["screen_s"] == pytest.approx(0.1) and c["whole_s"] == pytest.approx(0.3)
    assert c["screens_s"] == pytest.approx(0.24)  # the first screen counted as one whole screen
    assert c["rest_s"] == pytest.approx(0.2)


def test_the_table_has_a_row_per_run_with_a_curve(tmp_path, capsys):
    path = tmp_path / "runs.tgz"
    with tarfile.open(path, "w:gz") as tar:
        for name, record in (("jobs/0/metrics.json", metrics()), ("prep/metrics.json", {"target": None})):
            data = json.dumps(record).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    _eval_costs().main(str(path))
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| jobs/")]
    assert rows == ["| jobs/0 | 256 | 3 | 1 (512) | 0.100 | 0.240 | 0.300 | 0.74 | 0.200 | 15.0 | 4.9 % |"]
