"""A channels_last model resumed from its checkpoint: the optimizer's buffers keep their parameters'
strides, which CUDA's fused SGD / Adam / AdamW (fastpipe's default) require of every buffer (a
contiguous momentum buffer beside an NHWC weight is refused: check_fast_path_restrictions)."""
from __future__ import annotations

from types import SimpleNamespace

import torch

from fastpipe.checkpoint.state import load_optimizer_state
from fastpipe.checkpoint.background import HostSnapshot
from fastpipe.config import TrainConfig


def _trained_sgd():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(), torch.nn.LazyLinear(2))
    model(torch.randn(2, 3, 8, 8))
    model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_host_copies_keep_channels_last_strides():
    model, optimizer = _trained_sgd()
    copy = HostSnapshot().take({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    weight = model[0].weight
    assert copy["model"]["0.weight"].stride() == weight.stride() != weight.contiguous().stride()
    assert copy["optimizer"]["state"][0]["momentum_buffer"].stride() == weight.stride()
    assert torch.equal(copy["model"]["0.weight"], weight.detach())


def test_a_resumed_optimizer_state_takes_its_parameters_strides_whatever_the_file_holds():
    model, optimizer = _trained_sgd()
    saved = optimizer.state_dict()
    saved["state"] = {k: {n: v.contiguous() if torch.is_tensor(v) else v for n, v in s.items()}
                      for k, s in saved["state"].items()}  # a checkpoint written with contiguous buffers
    resumed = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    load_optimizer_state(SimpleNamespace(optimizer=resumed), None, saved, TrainConfig())
    for param in model.parameters():
        buffer = resumed.state[param]["momentum_buffer"]
        assert buffer.stride() == param.stride() and torch.equal(buffer, optimizer.state[param]["momentum_buffer"])
