"""Models built directly on the training device (issue 27): torch's device context, each module's own init."""
from __future__ import annotations

import pytest
import torch
from conftest import TINY, cpu_runtime, make_settings

from fastpipe.config import ModelConfig
from fastpipe.models import build_model

RESNET = ModelConfig(target="torchvision.models.resnet18")


def _built(device, seed: int = 0):
    torch.manual_seed(seed)
    return build_model(RESNET, {"num_classes": 10}, "resnet18", device=device)


def test_a_resnet_built_on_the_device_keeps_torchvisions_init_and_the_seed_gives_the_same_weights():
    direct, again, host = _built("cpu"), _built("cpu"), _built(None)
    for (name, p), q, h in zip(direct.named_parameters(), again.parameters(), host.parameters()):
        assert p.device.type == "cpu" and torch.equal(p, q), name  # same seed, same parameters
        assert torch.equal(p, h), name  # the CPU's generator: the same values as a host build
    assert not torch.equal(next(_built("cpu", seed=1).parameters()), next(direct.parameters()))
    conv = direct.conv1.weight  # torchvision: kaiming_normal_(mode="fan_out", relu); BatchNorm 1 and 0
    fan_out = conv.shape[0] * conv.shape[2] * conv.shape[3]
    assert conv.std().item() == pytest.approx((2 / fan_out) ** 0.5, rel=0.1) and abs(conv.mean().item()) < 0.01
    assert torch.all(direct.bn1.weight == 1) and torch.all(direct.bn1.bias == 0)
    # on another device the values come from that device's generator; the context is what places them there
    assert all(p.device.type == "meta" for p in _built("meta").parameters())


def test_the_graph_builds_the_model_on_its_device_and_says_how_long_it_took():
    from fastpipe.train import graph
    from fastpipe.job.graph_text import describe

    settings = make_settings(TINY)
    g = graph.build(settings, cpu_runtime())
    assert all(p.device.type == "cpu" for p in g.model.parameters())
    assert "built on cpu in" in describe(g, settings) and g.parallel.build_s > 0
