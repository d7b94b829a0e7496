"""fastpipe 0.1's spellings (config/legacy.py): they work from overrides, sweep lists, a project's YAML
and older run folders, with their warnings, yet no schema lists them; a moved ``_target_`` still trains."""
from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf, open_dict

from conftest import TINY, compose, make_settings, run_in_process
from fastpipe.config import Config, TrainConfig, legacy
from fastpipe.config.reload import run_settings


def test_no_schema_lists_an_old_spelling_or_a_run_fact():
    composed = compose([])
    assert not set(legacy.OLD_TRAIN_KEYS) & set(composed.train)
    assert not set(legacy.OLD_TRAIN_KEYS) & {f.name for f in dataclasses.fields(TrainConfig)}
    assert not {"overrides", "choices", "run_id"} & set(composed)
    settings = make_settings(["train.epochs=1"])
    assert settings.overrides == ["train.epochs=1"] and settings.run_id == ""  # still there for the record
    assert settings.choices["data"] == "default" and isinstance(settings, Config)


def test_old_train_keys_from_overrides_a_sweep_list_and_a_projects_yaml(tmp_path):
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    grid = OverridesParser.create().parse_overrides(["train.lr=0.01,0.02", "train.lr_warmup_steps=2"])
    jobs = [job for batch in BasicSweeper.split_arguments(grid, None) for job in batch]  # as -m expands them
    lrs = [make_settings(job).optimizer.params["lr"] for job in jobs]
    assert lrs == [0.01, 0.02]
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "old.yaml").write_text("# @package _global_\ntrain:\n  lr: 0.05\n  epochs: 2\n"
                                                      "  lr_schedule: constant\n")
    settings = make_settings(["+experiment=old", f"hydra.searchpath=[file://{tmp_path}]"])
    assert settings.optimizer.params["lr"] == 0.05 and settings.train.epochs == 2
    assert settings.lr_schedule.target == "fastpipe.stages.schedules.constant"
    assert settings.deprecations == [
        "train.lr is deprecated: use optimizer.lr=0.05 (it will be removed in the next release)",
        "train.lr_schedule / train.lr_warmup_steps are deprecated: use lr_schedule=constant (they will be removed in "
        "the next release)"]


@pytest.mark.parametrize("override,message", [
    ("train.lr=abc", "train.lr='abc': Value 'abc' of type 'str' could not be converted to Float"),
    ("train.lr_schedule=linear", "train.lr_schedule='linear' is not valid; use one of cosine, constant"),
    ("train.weight_decay=0.1", "train.weight_decay moved to the optimizer group: use optimizer.weight_decay=0.1 "
                               "instead of train.weight_decay=0.1"),
])
def test_a_wrong_old_key_is_one_line(override, message):
    from fastpipe.errors import ConfigError

    with pytest.raises(ConfigError) as excinfo:
        make_settings([override])
    assert str(excinfo.value) == message


def test_an_older_run_folder_reads_back(tmp_path):
    """A record that kept the run facts at its root, every old train key as null and the old module
    paths (as older run folders do), and one with a key of another loader, both reload."""
    record = compose(["data=mmap"])
    with open_dict(record):
        record.overrides, record.choices, record.run_id = ["data=mmap"], {"data": "mmap"}, "abc"
        record.train.update({key: None for key in legacy.OLD_TRAIN_KEYS})
        record.task._target_ = "fastpipe.tasks.Classification"
        record.data.num_workers = 0  # a key of data=default, dropped for mmap when the run was made
    (tmp_path / ".hydra").mkdir()
    record = OmegaConf.to_container(record)
    record["report"]["unreached_penalty"] = 2.0  # the first time-to-target release's
    (tmp_path / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(record))
    settings = run_settings(tmp_path, ["train.epochs=5"])
    assert settings.train.epochs == 5 and settings.data.name == "mmap" and settings.task.target.startswith("fastpipe.stages.")
    assert settings.notes == [
        "task._target_=fastpipe.tasks.Classification is deprecated: use task._target_=fastpipe.stages.tasks."
        "Classification (the module moved; the old path will be removed in the next release)",
        "data.num_workers=0 does not apply to data=mmap (a key of data=default): ignored for this run"]


def test_an_old_target_path_still_trains_with_its_warning(tmp_path, capsys):
    metrics = run_in_process(tmp_path, TINY + ["task._target_=fastpipe.tasks.Classification",
                                               "lr_schedule._target_=fastpipe.schedules.cosine"])
    assert metrics["status"] == "ok" and metrics["task"] == "Classification" and metrics["primary_metric"]["value"] >= 0
    err = capsys.readouterr().err
    for old, new in (("task", "fastpipe.stages.tasks.Classification"), ("lr_schedule", "fastpipe.stages.schedules.cosine")):
        note = (f"{old}._target_=fastpipe.{new.split('.', 2)[2]} is deprecated: use {old}._target_={new} (the module "
                "moved; the old path will be removed in the next release)")
        assert note in metrics["warnings"] and f"fastpipe: warning: {note}" in err
