"""The optimizer group, and the device-side skip of non-finite steps."""
from __future__ import annotations

import pytest
import torch

from conftest import make_settings
from fastpipe.stages.optim import build_optimizer, step_unless


def test_optimizer_lr_is_the_peak_and_train_lr_still_works_with_a_warning():
    settings = make_settings(["optimizer=sgd", "optimizer.lr=0.2", "optimizer.momentum=0.5"])
    opt = build_optimizer(settings.optimizer, settings.train, torch.nn.Linear(3, 2), torch.device("cpu"))
    assert isinstance(opt, torch.optim.SGD) and opt.param_groups[0]["momentum"] == 0.5
    assert opt.param_groups[0]["fused"] is True and opt.param_groups[0]["initial_lr"] == 0.2
    old = make_settings(["train.lr=0.3"])
    assert old.optimizer.params["lr"] == 0.3 and any("optimizer.lr=0.3" in d for d in old.deprecations)


def test_an_optimizer_without_the_fused_protocol_skips_on_the_host():
    settings = make_settings(["optimizer._target_=torch.optim.RMSprop", "~optimizer.betas", "optimizer.lr=0.01"])
    model = torch.nn.Linear(3, 2)
    opt = build_optimizer(settings.optimizer, settings.train, model, torch.device("cpu"))
    assert not getattr(opt, "_step_supports_amp_scaling", False)  # no found_inf: the host decides
    model(torch.randn(4, 3)).sum().backward()
    before = [p.detach().clone() for p in model.parameters()]
    step_unless(opt, torch.amp.GradScaler("cpu", enabled=False), torch.tensor(True))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    step_unless(opt, torch.amp.GradScaler("cpu", enabled=False), torch.tensor(False))
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_non_finite_step_leaves_parameters_and_state_untouched(optimizer):
    settings = make_settings([f"optimizer={optimizer}"])
    model = torch.nn.Linear(3, 2)
    opt = build_optimizer(settings.optimizer, settings.train, model, torch.device("cpu"))
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    model(torch.randn(4, 3)).sum().backward()
    before = [p.detach().clone() for p in model.parameters()]
    step_unless(opt, scaler, torch.tensor(True))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    step_unless(opt, scaler, torch.tensor(False))
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert not hasattr(opt, "found_inf")  # the protocol attribute never outlives the step
