"""A project's own data, model and objective: the example project run as a new user would, its
task's metrics in metrics.json and the report, clear lines for wrong _target_s, and old configs."""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

EXAMPLE = REPO / "examples" / "friedman"
SHORT = ["train.epochs=2", "dataset.num_samples=1024", "train.batch_size=64", "measure.warmup_steps=2",
         "measure.window=4", "runtime.progress=false"]


@pytest.fixture
def project(tmp_path):
    """A copy of examples/friedman outside the repository, as a user would have it."""
    folder = tmp_path / "friedman"
    shutil.copytree(EXAMPLE, folder)
    return folder


def fastpipe(folder: Path, *args, timeout=300) -> subprocess.CompletedProcess:
    """``python -m fastpipe ARGS`` from ``folder`` (the project's own module imports from there)."""
    env = {**os.environ, "FASTPIPE_CACHE": str(folder / "cache")}
    return subprocess.run([sys.executable, "-m", "fastpipe", *args], cwd=folder, capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_example_project_runs_as_its_readme_says(project):
    """The README's command: the project's recipe reaches near the noise floor (mse ~1)."""
    proc = fastpipe(project, "--config-dir", "conf", "+experiment=regression", "runtime.progress=false",
                    "hydra.run.dir=run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads((project / "run" / "metrics.json").read_text())
    assert m["status"] == "ok" and m["task"] == "MSE" and m["accuracy"] is None
    assert set(m["val_metrics"]) == {"mse", "mae", "rmse"}
    assert m["primary_metric"] == {"name": "mse", "value": m["val_metrics"]["mse"], "higher_is_better": False}
    assert m["val_metrics"]["rmse"] == pytest.approx(m["val_metrics"]["mse"] ** 0.5)
    assert m["val_metrics"]["mse"] < 2.0, m["val_metrics"]  # y's variance is ~24; noise alone gives 1.0
    assert "held-out     mse" in proc.stdout and "(primary)" in proc.stdout


def test_project_trains_under_ddp(project):
    proc = fastpipe(project, "--config-dir", "conf", "+experiment=regression", "launcher=ddp",
                    "launcher.nproc_per_node=2", *SHORT, "hydra.run.dir=run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads((project / "run" / "metrics.json").read_text())
    assert m["status"] == "ok" and m["env"]["world_size"] == 2 and len(m["per_rank"]["throughput"]) == 2
    assert m["primary_metric"]["name"] == "mse" and m["val_metrics"]["mse"] > 0


def test_sweep_report_judges_parity_by_the_primary_metric_and_its_direction(project):
    """precision x compile over the project: the parity line names mse (lower is better), each row's
    held-out cell is its mse, and the winner qualifies by it."""
    proc = fastpipe(project, "--config-dir", "conf", "-m", "+experiment=regression", "precision=fp32,amp",
                    "compile=off,default", *SHORT, "report.parity_tol=0.5", "launcher.fresh_process=false",
                    "hydra.sweep.dir=sweep", timeout=900)  # each job in the Hydra process: the report is the subject
    assert proc.returncode == 0, proc.stderr[-3000:]
    md = (project / "sweep" / "report.md").read_text()
    assert "primary held-out metric (mse, lower is better)" in md and "| held-out mse |" in md
    rows = list(csv.DictReader((project / "sweep" / "report.csv").open()))
    assert len(rows) == 4 and {r["metric"] for r in rows} == {"mse"}
    base = next(r for r in rows if r["baseline"] == "True")
    for r in rows:
        worse = float(r["metric_value"]) - float(base["metric_value"])
        assert r["parity"] == ("baseline" if r is base else "ok" if worse <= 0.5 + 1e-9 else "FAIL")
    best = next(r for r in rows if r["best"] == "True")
    assert best["parity"] in ("ok", "baseline") and "mse" in (project / "sweep" / "best.yaml").read_text()
