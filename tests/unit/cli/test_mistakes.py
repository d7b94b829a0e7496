"""The commonest command-line mistakes get fastpipe's one line alone (exit 1), not Hydra's message with its
advice to add ``+``, in this process: a choice of a conf/ folder not searched, a choice nowhere, a key the
config lacks without ``+``."""
from __future__ import annotations

import sys

import pytest
from omegaconf import OmegaConf

from conftest import compose
from fastpipe.config import to_settings
from fastpipe.errors import ConfigError

RINGS = "class Net:\n    def __init__(self, num_classes=4, hidden=8):\n        self.hidden = hidden\n"
WITH_PLUS = ("model.hiden is not a parameter of rings.Net (it takes: num_classes, hidden); fix the key, or remove it "
             "from the model config")


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder, the working folder: rings.Net and its conf/model/ringnet.yaml."""
    (tmp_path / "rings.py").write_text(RINGS)
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "ringnet.yaml").write_text("_target_: rings.Net\nhidden: 8\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    yield tmp_path
    sys.modules.pop("rings", None)


def last_line(err: str) -> str:
    """The one line the command printed: fastpipe's, and nothing of Hydra's."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fastpipe:"), err
    return lines[-1]


def test_a_choice_of_a_conf_folder_here_names_config_dir(app, project):
    code, out, err = app("--cfg", "job", "model=ringnet")
    assert code == 1 and out == ""
    assert last_line(err) == ("fastpipe: model=ringnet is conf/model/ringnet.yaml, which this command does not "
                              "search: add --config-dir conf")
    code, out, help_err = app("--help", "model=ringnet")  # --help composes outside Hydra's report: the same
    assert code == 1 and out == "" and "Traceback" not in help_err and last_line(help_err) == last_line(err)
    code, out, _ = app("--cfg", "job", "--config-dir", "conf", "model=ringnet")
    assert code == 0 and OmegaConf.create(out).model._target_ == "rings.Net"


def test_a_choice_nowhere_lists_the_real_choices_and_never_a_schema(app, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = app("--cfg", "job", "data=mmapp")
    assert code == 1 and "schema_" not in err
    line = last_line(err)  # fastpipe's own choices (a choice another test registered in this process may follow)
    assert line.startswith("fastpipe: data=mmapp is not a choice of data (did you mean data=mmap?); its choices: "
                           "dali, default, mmap") and line.endswith(" (a project's own data/mmapp.yaml comes with "
                                                                    "--config-dir DIR)")


def test_an_unknown_key_without_plus_gets_the_line_it_gets_with_plus(app, project):
    cfg = compose([f"hydra.searchpath=[file://{project / 'conf'}]", "model=ringnet", "+model.hiden=8"])
    with pytest.raises(ConfigError) as added:  # what a run refuses with +: its config's check, before training
        to_settings(cfg, check=False).model.check_keys()
    assert str(added.value) == WITH_PLUS
    code, _, err = app("--cfg", "job", "--config-dir", "conf", "model=ringnet", "model.hiden=8")
    assert code == 1 and last_line(err) == f"fastpipe: {WITH_PLUS}"  # not Hydra's "To append ... use +"
    code, _, err = app("-m", "--config-dir", "conf", "model=ringnet", "model.hiden=8,16",  # refused before any job
                       "launcher.fresh_process=false", f"hydra.sweep.dir={project / 'sweep'}")
    assert code == 1 and last_line(err) == f"fastpipe: {WITH_PLUS}"
    code, _, err = app("--cfg", "job", "train.epoch=3")  # fastpipe's own schema: its keys and the nearest
    assert code == 1
    assert last_line(err).startswith("fastpipe: train.epoch is not a key of TrainConfig (the nearest: train.epochs; "
                                     "its keys: batch_size, ")
