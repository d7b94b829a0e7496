"""An old spelling on the command line is one line naming today's key (a misspelt
key: tests/unit/cli/test_mistakes.py); an older run folder's recorded config (old keys, moved modules)
still reads back."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from conftest import compose
from fastpipe.config.keys import OLD_SPELLINGS
from fastpipe.config.reload import run_settings


def test_an_old_spelling_is_one_line_naming_the_new_key(app):
    code, _, err = app("--cfg", "job", "train.epochs=2", "train.lr=0.1")
    assert code == 1  # fastpipe's line alone, not Hydra's advice to add +train.lr
    assert err.strip().splitlines() == ["fastpipe: an old spelling: use optimizer.lr=0.1 instead of train.lr=0.1"]


def test_the_note_names_each_old_spelling_and_moved_module():
    from fastpipe.config.keys import old_spelling_note

    assert old_spelling_note(["train.epochs=3", "optimizer.lr=0.1", "train.lrs=1"]) is None
    assert old_spelling_note(["+model.kwargs.width=8", "train.lr_schedule=constant",
                              "task._target_=fastpipe.tasks.Classification"]) == (
        "old spellings: use model.width=8 instead of +model.kwargs.width=8; use lr_schedule=constant instead of "
        "train.lr_schedule=constant; use task._target_=fastpipe.stages.tasks.Classification instead of "
        "task._target_=fastpipe.tasks.Classification")


def test_an_older_run_folder_reads_back(tmp_path):
    """A record that kept the run facts at its root, every old train key as null, the old module paths and
    a removed report key (as older run folders do), and a key of another loader: it reloads."""
    record = OmegaConf.to_container(compose(["data=mmap"]))
    record.update(overrides=["data=mmap"], choices={"data": "mmap"}, run_id="abc")
    record["train"].update({key.split(".", 1)[1]: None for key in OLD_SPELLINGS if key.startswith("train.")})
    record["report"]["unreached_penalty"] = 2.0
    record["task"]["_target_"] = "fastpipe.tasks.Classification"
    record["lr_schedule"]["_target_"] = "fastpipe.schedules.cosine"
    record["data"]["num_workers"] = 0  # a key of data=default, dropped for mmap when the run was made
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(record))
    settings = run_settings(tmp_path, ["train.epochs=5"])
    assert settings.train.epochs == 5 and settings.data.name == "mmap" and settings.run_id == ""
    assert settings.task.target == "fastpipe.stages.tasks.Classification"
    assert settings.lr_schedule.target == "fastpipe.stages.schedules.cosine"
    assert settings.notes == ["data.num_workers=0 does not apply to data=mmap (a key of data=default): ignored for "
                              "this run"]
    settings.check()  # the rewritten targets import


def test_every_target_in_conf_and_every_moved_module_still_imports():
    """What users may have written stays valid: each ``_target_`` of conf/ (and of the sweep plugins' and
    loggers' schemas) imports as written, and each old path of MOVED_MODULES leads to an importable module."""
    import importlib
    import re

    from conftest import REPO
    from fastpipe.config.keys import MOVED_MODULES, current_target
    from fastpipe.config.logger import SCHEMAS
    from fastpipe.instantiate import import_target
    from hydra_plugins.fastpipe_sweeps import config as plugin_config

    written = {m.group(1) for path in (REPO / "conf").rglob("*.yaml")
               for m in re.finditer(r"_target_:\s*([\w.]+)", path.read_text())}
    written |= {node._target_ for entry in SCHEMAS.values() for node in entry.values()}
    written |= {c._target_ for c in (plugin_config.GpusLauncherConf, plugin_config.HalvingSweeperConf,
                                     plugin_config.RaceSweeperConf)}
    assert len(written) > 15 and "fastpipe.stages.tasks.Classification" in written
    for target in sorted(written):
        import_target("_target_", target)
    for old, new in MOVED_MODULES.items():
        importlib.import_module(new.rstrip("."))
        assert current_target(old + "X") == new + "X"
