"""``python -m fastpipe --help`` is fastpipe's own (every real choice, no ``schema_*`` entry, no internal or
removed key), ``--cfg job`` lists settings only, and ``--hydra-help`` is still Hydra's."""
from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from conftest import CONF_DIR, in_process
from fastpipe.config import Config, TrainConfig
from fastpipe.config.meanings import meaning

RUN_FACTS = {"overrides", "choices", "run_id"}


@pytest.fixture(scope="module")
def outputs():
    """stdout of --help, --cfg job (both with a choice made) and --hydra-help."""
    flags = {"help": ["--help", "precision=amp"], "cfg": ["--cfg", "job", "precision=amp"], "hydra": ["--hydra-help"]}
    done = {k: in_process(f) for k, f in flags.items()}
    for k, p in done.items():
        assert p.returncode == 0, p.stderr[-2000:]
    return {k: p.stdout for k, p in done.items()}


def real_choices():
    """Each group of conf/ (outside hydra/) and its YAML files: the choices a user can pick."""
    return {d.name: sorted(f.stem for f in d.glob("*.yaml")) for d in CONF_DIR.iterdir()
            if d.is_dir() and d.name != "hydra" and list(d.glob("*.yaml"))}


def registered_by_tests(group: str) -> set:
    """The choices of ``group`` registered in this process by modules outside fastpipe (the tests' own)."""
    from fastpipe.config import registry
    from fastpipe.config.logger import SCHEMAS

    if group == "logger":
        return {n for n, s in SCHEMAS.items() if not s[n]._target_.startswith("fastpipe.")}
    if group not in registry.CLOSED_GROUPS:
        return set()
    return {n for n in registry.names(group) if not registry.choice(group, n).schema.__module__.startswith("fastpipe.")}


def test_help_lists_every_real_choice_and_nothing_else(outputs):
    text = outputs["help"]
    assert text.startswith("fastpipe: ") and "powered by Hydra" not in text and "__main__" not in text
    assert "schema_" not in text and "--hydra-help" in text and "docs/" in text
    groups = text.split("== Config groups", 1)[1].split("== Config (", 1)[0]
    listed = {m[1]: (m[2].split(", "), m[3]) for m in re.finditer(r"^  \+?([\w/]+):\s+(.+?)(?:   \[(.+)\])?$", groups, re.M)}
    # a choice a test module registered in this process (tests/support/toy_loader.py's data=toy) is real too
    assert {g: [c for c in choices if c not in registered_by_tests(g)] for g, (choices, _) in listed.items()} \
        == real_choices()
    root = yaml.safe_load((CONF_DIR / "config.yaml").read_text())["defaults"]
    defaults = {k: str(v) for d in root if isinstance(d, dict) for k, v in d.items() if not k.startswith("override")}
    # in brackets each group's choice on this command line (presets such as +experiment have none)
    assert {g: chosen for g, (_, chosen) in listed.items() if chosen} == {**defaults, "precision": "amp"}
    config = yaml.safe_load(text.split("does not list) ==\n", 1)[1].split("\nBeside each key", 1)[0])
    assert config == yaml.safe_load(outputs["cfg"])  # the composed config, as --cfg job prints it


def test_help_prints_each_keys_meaning_beside_it(outputs):
    """The meanings reach the printed --help (the YAML reading above drops comments; config_help alone:
    tests/unit/cli/test_help.py)."""
    text = outputs["help"]
    assert re.search(r"^  batch_size: 64 +# " + re.escape(meaning(TrainConfig, "batch_size")) + "$", text, re.M)
    assert re.search(r"^seed: 0 +# " + re.escape(meaning(Config, "seed")) + "$", text, re.M)
    assert meaning(Config, "seed").startswith("each rank seeds")  # the root's keys have meanings too


def test_cfg_job_lists_settings_only(outputs):
    config = yaml.safe_load(outputs["cfg"])
    assert set(config) == {f.name for f in dataclasses.fields(Config)} and not RUN_FACTS & set(config)
    assert set(config["train"]) == {f.name for f in dataclasses.fields(TrainConfig)} and config["train"]["batch_size"] == 64
    assert config["precision"]["name"] == "amp"


def test_hydra_help_is_still_hydras(outputs):
    text = outputs["hydra"]
    assert text.startswith("Hydra (") and "== Flags ==" in text and "--hydra-help : Hydra's help" in text
    assert re.search(r"^hydra/launcher: .*\bgpus\b", text, re.M) and re.search(r"^hydra/help: .*\bfastpipe\b", text, re.M)
