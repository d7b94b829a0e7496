"""Adding a loader and a logger touches only the files docs/architecture.md names: a project's module
for each (tests/support/toy_loader.py: builder and registered schema; tests/support/toy_logger.py: class
and registered schema) and its config file (here its ConfigStore entry). Registered, they run end to
end, and everything that used to keep a list of names reads what they declare instead: the config
check and the stage builder (the loader's support), the loop (both), provenance (the files the logger
leaves in the working folder) and the sweep report (what it leaves in each job's folder)."""
from __future__ import annotations

import json
import re
import subprocess

import pytest
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

import toy_logger  # noqa: F401  (registers logger=toy)
from conftest import REPO, TINY, run_in_process
from toy_loader import ToyLoaderConfig  # registers data=toy

from fastpipe.config import logger as logger_config
from fastpipe.errors import ConfigError


# Registering is importing the project's modules; their config files, as conf/data/toy.yaml and
# conf/logger/toy.yaml would give them, are these ConfigStore entries.
ConfigStore.instance().store(group="data", name="toy", node=ToyLoaderConfig)
ConfigStore.instance().store(group="logger", name="toy", node=logger_config.SCHEMAS["toy"])


def git(folder, *args) -> str:
    return subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(folder), *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def job(sweep, num: int, overrides) -> dict:
    """One tiny run trained in this process into the sweep's job folder ``num``, as a sweep leaves it."""
    folder = sweep / str(num)
    (folder / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(list(overrides)), folder / ".hydra" / "overrides.yaml")
    return run_in_process(folder, [o for o in TINY if not o.startswith("data.")] + list(overrides))


def test_a_registered_loader_and_logger_run_end_to_end_and_every_reader_sees_them(tmp_path, monkeypatch):
    from fastpipe.record.provenance import code_provenance
    from fastpipe.report.sweep_folder import SweepSpec
    from fastpipe.report.publish import write_report

    project = tmp_path / "project"  # the working folder: a project's clean git repository
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    (project / "train.py").write_text("import fastpipe\n")
    git(project, "add", "."), git(project, "commit", "-q", "-m", "first")
    monkeypatch.chdir(project)
    sweep = project / "sweeps" / "toy"
    runs = [job(sweep, num, ["data=toy", f"data.shuffle={shuffle}", "logger=[tensorboard,toy]"])
            for num, shuffle in enumerate(("true", "false"))]
    assert [m["status"] for m in runs] == ["ok", "ok"] and runs[0]["choices"]["data"] == "toy"
    assert "3. loader     data=toy  stacked in the training process  shuffle=False" in (sweep / "1" / "graph.txt").read_text()
    events = [json.loads(line) for line in (sweep / "0" / "toy.log").read_text().splitlines()]
    assert {e["event"] for e in events} == {"window", "eval", "end"} and events[-1] == {"event": "end", "step": 12,
                                                                                        "status": "ok"}
    # Provenance reads the logger's working_files: its store is not the project's code.
    assert (project / "toy-store").is_dir()
    assert code_provenance(project, written=[sweep])[0]["project"]["dirty"] is False
    (project / "notes.txt").write_text("a file of the project\n")  # anything else still counts
    assert code_provenance(project, written=[sweep])[0]["project"]["dirty"] is True
    # The report's footer reads what the logger writes; its table and CSV are the columns'.
    result = write_report(sweep, SweepSpec(task_overrides=["data.shuffle=true,false"]))
    assert result.columns == ["data.shuffle"] and (result.best or result.candidate) is not None
    footer = (sweep / "report.md").read_text().splitlines()[-1]
    assert "Every job's folder holds its metrics.json, graph.txt, TensorBoard scalars (`tb/`), its toy log " \
           "(`toy.log`);" in footer


def test_a_registered_loader_is_refused_what_it_does_not_declare(tmp_path):
    with pytest.raises(ConfigError, match="^train.target_eval_samples needs a loader that can read a subset of the "
                                          "held-out split, and data=toy's builder takes no subset"):
        run_in_process(tmp_path, [o for o in TINY if not o.startswith("data.")]
                       + ["data=toy", "train.target=0.99", "train.eval_every=6", "train.target_eval_samples=16"])


def test_architecture_md_names_the_files_each_addition_touches():
    section = (REPO / "docs" / "architecture.md").read_text().split("## Where a new option goes", 1)[1]
    rows = dict(re.findall(r"^\| ([^|]+?) \| (.+) \|$", section.split("\n## ", 1)[0], flags=re.M))
    named = {what: set(re.findall(r"`((?:fastpipe|conf|docs)/[^`]+)`", files)) for what, files in rows.items()}
    assert named["`data=<new>` (a loader)"] >= {"fastpipe/data/<new>.py", "fastpipe/config/data.py",
                                                 "conf/data/<new>.yaml", "conf/sweep/all.yaml", "docs/data.md"}
    assert named["`logger=<new>`"] >= {"fastpipe/record/loggers/<new>.py", "fastpipe/config/logger.py",
                                       "conf/logger/<new>.yaml", "docs/tracking.md"}
    assert named["a report column"] == {"fastpipe/report/columns.py", "docs/sweeps.md"}
