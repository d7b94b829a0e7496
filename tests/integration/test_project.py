"""A project's own data, model and objective: the example project run as a new user would, its
task's metrics in metrics.json (the sweep report's parity by them: test_friedman_readme.py), clear
lines for wrong _target_s, and old configs."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, in_process

EXAMPLE = REPO / "examples" / "friedman"
SHORT = ["train.epochs=2", "dataset.num_samples=1024", "train.batch_size=64", "measure.warmup_steps=2",
         "measure.window=4", "runtime.progress=false"]


@pytest.fixture
def project(tmp_path):
    """A copy of examples/friedman outside the repository, as a user would have it."""
    folder = tmp_path / "friedman"
    shutil.copytree(EXAMPLE, folder)
    return folder


def fastpipe(folder: Path, *args) -> subprocess.CompletedProcess:
    """``python -m fastpipe ARGS`` from ``folder`` (the project's own module imports from there), in this process."""
    return in_process(args, cwd=folder, env={"FASTPIPE_CACHE": str(folder / "cache")})


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


