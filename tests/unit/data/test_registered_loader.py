"""A data choice registered from a test module trains through the normal stage builder, and what
it registers it supports is enforced (config/registry.py)."""
from __future__ import annotations

import pytest
from conftest import TINY, make_settings, run_in_process, without_shapes
from hydra.core.config_store import ConfigStore
from toy_loader import ToyLoader, ToyLoaderConfig, build_toy_loader

from fastpipe.config.registry import Choice
from fastpipe.errors import ConfigError

# The choice itself, as conf/data/toy.yaml would give it: its schema with its defaults.
ConfigStore.instance().store(group="data", name="toy", node=ToyLoaderConfig)
TOY = [o for o in TINY if not o.startswith("data.")] + ["data=toy"]  # data.num_workers is data=default's


def test_a_registered_loader_trains_a_run_through_the_normal_builder(tmp_path, monkeypatch):
    batches = []
    monkeypatch.setattr(ToyLoader, "set_epoch", lambda self, epoch: batches.append((self.shuffle, epoch)))
    m = run_in_process(tmp_path, TOY)
    assert m["status"] == "ok" and m["steps"] == 12 and m["choices"]["data"] == "toy"
    assert m["val_metrics"]["accuracy"] is not None and m["throughput"] > 0
    assert "3. loader     data=toy  stacked in the training process  shuffle=True" in (tmp_path / "graph.txt").read_text()
    assert (True, 0) in batches and (True, 1) in batches  # the loop drove it epoch by epoch


def test_what_a_registered_loader_supports_is_enforced_when_the_config_is_read():
    with pytest.raises(ConfigError, match="^data=toy works with launcher=single, not launcher=ddp; choose another"):
        make_settings(TOY + ["launcher=ddp"])
    synthetic = without_shapes(TOY) + ["dataset=synthetic"]
    with pytest.raises(ConfigError, match="^data=toy cannot read dataset=synthetic: it is generated on the device and "
                                          "has no files; use data=default$"):
        make_settings(synthetic)
    with pytest.raises(ConfigError, match="^data=gpu_only runs on cuda, but training runs on cpu; choose another data"):
        Choice("data", "gpu_only", ToyLoaderConfig, build_toy_loader, devices=("cuda",)).refuse_unsupported("cpu")
