"""examples/friedman/README.md's commands, as written: every job of each composes, converts and passes
the check of its ``_target_`` s, without a note, and the README's sweep runs to its report, without a
warning (data=default's num_workers=auto takes no worker processes for the in-memory rows)."""
from __future__ import annotations

import csv
import json
import re
import shlex
import shutil

import pytest
from omegaconf import open_dict

from conftest import REPO, in_process

EXAMPLE = REPO / "examples" / "friedman"
SHORT = ["train.epochs=1", "dataset.num_samples=512", "train.batch_size=64", "measure.warmup_steps=2",
         "measure.window=2", "runtime.progress=false", "launcher.fresh_process=false"]


def readme_commands():
    """The ``python -m fastpipe`` lines of the README's bash blocks, as argument lists."""
    blocks = re.findall(r"```bash\n(.*?)```", (EXAMPLE / "README.md").read_text(), flags=re.S)
    lines = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    return [shlex.split(line)[3:] for line in lines if line.startswith("python -m fastpipe ")]


def jobs(args):
    """Each job's overrides, as the command's sweeper expands them (one job without ``-m``)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = [a for i, a in enumerate(args) if a not in ("-m", "--config-dir") and args[i - 1] != "--config-dir"]
    if "-m" not in args:
        return [overrides]
    parsed = OverridesParser.create().parse_overrides(overrides)
    return [list(job) for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def test_the_readme_has_the_three_commands_this_file_checks():
    assert [("-m" in a, "+experiment=regression" in a) for a in readme_commands()] == [
        (False, True), (False, False), (True, True)]


@pytest.mark.parametrize("command", readme_commands(), ids=["experiment", "groups", "sweep"])
def test_every_job_of_a_readme_command_is_accepted(command, monkeypatch):
    from hydra import compose, initialize_config_dir

    from fastpipe.config import GROUPS, register_configs, to_settings

    assert command[:2] == ["--config-dir", "conf"]
    monkeypatch.chdir(EXAMPLE)  # the README runs from the example's folder: friedman.py imports from there
    register_configs()
    for job in jobs(command):
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose("config", overrides=job + [f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]"],
                          return_hydra_config=True)
        choices = {g: str(cfg.hydra.runtime.choices[g]) for g in GROUPS if g in cfg.hydra.runtime.choices}
        with open_dict(cfg):
            del cfg["hydra"]  # what the job's task function receives
        settings = to_settings(cfg, choices)  # imports each _target_ and checks its keys
        assert (settings.dataset.target, settings.task.target) == ("friedman.Friedman1", "friedman.MSE")
        assert settings.notes == [], job


@pytest.mark.slow
def test_the_readme_sweep_runs_every_loader_to_a_report(tmp_path):
    """The README's sweep, shortened (one epoch, jobs in the sweep's process): the project trains through
    both loaders with its own metrics, four ok rows; the report judges parity by the primary metric and
    its direction (the parity line names mse, lower is better; each row's held-out cell is its mse) and
    the winner qualifies by it."""
    folder = tmp_path / "friedman"
    shutil.copytree(EXAMPLE, folder)
    sweep = readme_commands()[2]
    proc = in_process([*sweep, *SHORT, "report.parity_tol=0.5", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                      cwd=folder, env={"FASTPIPE_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {}
    for metrics_file in sorted((tmp_path / "sweep").glob("[0-9]*/metrics.json")):
        m = json.loads(metrics_file.read_text())
        rows[m["choices"]["precision"], m["choices"]["data"]] = m
    assert sorted(rows) == [("amp", "default"), ("amp", "mmap"), ("fp32", "default"), ("fp32", "mmap")]
    for (precision, data), m in rows.items():
        assert m["status"] == "ok" and m["task"] == "MSE" and set(m["val_metrics"]) == {"mse", "mae", "rmse"}
        assert m["choices"]["task"] == "mse" and m["primary_metric"]["name"] == "mse" and m["val_metrics"]["mse"] > 0
        assert not any("does not apply" in w for w in m["warnings"]), m["warnings"]  # no dropped key
    graphs = [g.read_text() for g in sorted((tmp_path / "sweep").glob("[0-9]*/graph.txt"))]
    assert len(graphs) == 4 and sum("packed now" in g for g in graphs) == 1  # the mmap jobs share one pack
    assert len(list((tmp_path / "cache" / "packs").glob("*records*.fppack"))) == 1
    for text in graphs:
        assert "input=float32[10]  target=float32[1]" in text and "MSE  primary metric: mse (lower is better)" in text
    assert "does not apply" not in proc.stderr + proc.stdout
    assert sum("num_workers=0 (auto: " in g for g in graphs) == 2  # the data=default jobs
    md = (tmp_path / "sweep" / "report.md").read_text()
    assert "4 jobs, 4 ok" in md
    assert "primary held-out metric (mse, lower is better)" in md and "| held-out mse |" in md
    table = list(csv.DictReader((tmp_path / "sweep" / "report.csv").open()))
    assert len(table) == 4 and {r["metric"] for r in table} == {"mse"}
    base = next(r for r in table if r["baseline"] == "True")
    for r in table:
        worse = float(r["metric_value"]) - float(base["metric_value"])
        assert r["parity"] == ("baseline" if r is base else "ok" if worse <= 0.5 + 1e-9 else "FAIL")
    # one run per job: a winner only beyond the noise (issue 54); best.yaml exactly when one is named
    named = [r for r in table if r["best"] == "True"]
    assert (tmp_path / "sweep" / "best.yaml").is_file() == bool(named) and len(named) <= 1
    assert all(r["parity"] in ("ok", "baseline") for r in named)
    assert named or "- too close to call:" in md
