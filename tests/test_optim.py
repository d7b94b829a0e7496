"""The learning-rate schedule and the device-side skip of non-finite steps."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import make_settings
from fastpipe.optim import build_optimizer, learning_rate, step_unless


def test_cosine_schedule_warms_up_then_decays_to_zero():
    cfg = make_settings(["train.lr=0.1", "train.lr_warmup_steps=4"]).train
    lrs = [learning_rate(cfg, step, 20) for step in range(20)]
    assert lrs[:4] == pytest.approx([0.025, 0.05, 0.075, 0.1])
    assert lrs[4] == pytest.approx(0.1) and all(a >= b for a, b in zip(lrs[4:], lrs[5:]))
    assert lrs[12] == pytest.approx(0.1 * 0.5 * (1 + math.cos(math.pi * 8 / 16)))
    assert learning_rate(cfg, 20, 20) == pytest.approx(0.0)


def test_constant_schedule():
    cfg = make_settings(["train.lr=0.02", "train.lr_schedule=constant"]).train
    assert {learning_rate(cfg, s, 10) for s in range(10)} == {0.02}


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_non_finite_step_leaves_parameters_and_state_untouched(optimizer):
    cfg = make_settings([f"train.optimizer={optimizer}"]).train
    model = torch.nn.Linear(3, 2)
    opt = build_optimizer(cfg, model.parameters(), torch.device("cpu"))
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    model(torch.randn(4, 3)).sum().backward()
    before = [p.detach().clone() for p in model.parameters()]
    step_unless(opt, scaler, torch.tensor(True))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    step_unless(opt, scaler, torch.tensor(False))
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert not hasattr(opt, "found_inf")  # the protocol attribute never outlives the step
