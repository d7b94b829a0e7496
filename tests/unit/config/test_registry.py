"""What is written beside the registry stays in step with it: the LoaderConfig type lists fastpipe's own
loaders and conf/sweep/all.yaml sweeps every one of them and every compile mode (the registry cannot
feed them: a Union is a static type, and the sweep's first values are its baseline). And the questions
that used to compare names ask what a choice registered."""
from __future__ import annotations

import typing

import pytest
import yaml

from conftest import CONF_DIR
from fastpipe.config import LoaderConfig, registry
from fastpipe.errors import ConfigError


def own(group: str):
    """fastpipe's own choices of ``group`` (a test may have registered one of its own)."""
    return [n for n in registry.names(group) if registry.choice(group, n).schema.__module__.startswith("fastpipe.")]


def test_loader_config_is_every_loader_fastpipe_registers():
    assert set(typing.get_args(LoaderConfig)) == {registry.choice("data", n).schema for n in own("data")}


def test_the_all_sweep_sweeps_every_loader_and_compile_mode_fastpipe_registers():
    params = yaml.safe_load((CONF_DIR / "sweep" / "all.yaml").read_text())["hydra"]["sweeper"]["params"]
    assert params["data"].split(",") == own("data") and params["data"].startswith("default,")  # the baseline
    assert params["compile"].split(",") == own("compile")
    # fp8 needs compile and fp8 tensor cores: the sweep keeps to the precisions every machine runs
    assert params["precision"].split(",") == [n for n in own("precision") if registry.choice("precision", n).requires
                                               is None]


def test_each_choice_fastpipe_registers_has_its_config_file():
    for group in registry.CLOSED_GROUPS:
        assert {p.stem for p in (CONF_DIR / group).glob("*.yaml")} == set(own(group)), group


def test_refusals_ask_what_a_choice_registered():
    with pytest.raises(ConfigError, match="^train.overfit_batches works with data=default or data=mmap"):
        registry.choice("data", "dali").refuse_overfit_batches()
    with pytest.raises(ConfigError, match=r"^data=mmap reads samples by index, but dataset=s is a stream \(an "
                                          r"IterableDataset\); use data=default$"):
        registry.choice("data", "mmap").refuse_stream("s")
    registry.choice("data", "default").refuse_stream("s")  # it splits streams over its readers
    assert registry.lower_precision("fp32") == "precision=amp"  # the out-of-memory advice
    assert registry.lower_precision("amp") is None and registry.lower_precision("fp8") is None
    missing = registry.Requirement("no_such_module_fastpipe", "fastpipe[x]", "the x library", "data=default")
    assert not missing.installed() and missing.extra == "x"
    assert missing.missing_text("data=x") == ('data=x needs the x library, which is not installed: '
                                              'pip install "fastpipe[x]" (or use data=default)')
