"""The optimizer group: the peak lr, parameter groups, gradient clipping, lr scaling with the batch, and
the device-side skip of non-finite steps."""
from __future__ import annotations

import pytest
import torch

from conftest import TINY, cpu_runtime, make_settings
from fastpipe.stages.optim import build_optimizer, clip_gradients, lr_factor, step_unless


def test_optimizer_lr_is_the_peak():
    settings = make_settings(["optimizer=sgd", "optimizer.lr=0.2", "optimizer.momentum=0.5"])
    opt = build_optimizer(settings.optimizer, settings.train, torch.nn.Linear(3, 2), torch.device("cpu"))
    assert isinstance(opt, torch.optim.SGD) and opt.param_groups[0]["momentum"] == 0.5
    assert opt.param_groups[0]["fused"] is True and opt.param_groups[0]["initial_lr"] == 0.2


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


@pytest.mark.parametrize("overrides,groups", [([], 2), (["optimizer=sgd"], 1), (["optimizer=sgd", "train.no_decay=true"], 2),
                                              (["train.no_decay=false"], 1)])
def test_no_weight_decay_on_biases_and_norms_for_adamw_by_default(overrides, groups):
    settings = make_settings(overrides)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    opt = build_optimizer(settings.optimizer, settings.train, model, torch.device("cpu"))
    assert len(opt.param_groups) == groups
    if groups == 2:
        flat = opt.param_groups[1]
        assert flat["weight_decay"] == 0.0 and all(p.dim() == 1 for p in flat["params"]) and len(flat["params"]) == 3
        assert opt.param_groups[0]["weight_decay"] > 0 and opt.param_groups[0]["params"][0].dim() == 2


# ------------------------------------------------------------------ clipping
class FakeScaler:
    """GradScaler's protocol with fp16-style scaling by 1024 on a machine without fp16."""

    def __init__(self):
        self.calls = []

    def is_enabled(self):
        return True

    def unscale_(self, optimizer):
        self.calls.append("unscale_")
        for group in optimizer.param_groups:
            for p in group["params"]:
                p.grad.div_(1024.0)


def test_clipping_unscales_first_and_returns_the_true_norm():
    model = torch.nn.Linear(4, 1, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    true_grad = torch.tensor([[3.0, 4.0, 0.0, 0.0]])  # norm 5
    model.weight.grad = true_grad * 1024.0  # as the scaled loss's backward leaves it
    scaler = FakeScaler()
    norm = clip_gradients(opt, scaler, max_norm=1.0)
    assert scaler.calls == ["unscale_"] and isinstance(norm, torch.Tensor)
    assert float(norm) == pytest.approx(5.0)
    assert model.weight.grad.norm().item() == pytest.approx(1.0, rel=1e-4)
    assert torch.allclose(model.weight.grad, true_grad / 5.0, atol=1e-5)


def test_lr_scaling_rules():
    cfg = make_settings(["train.batch_size=64", "train.grad_accum=2", "train.lr_scaling=linear",
                         "train.lr_reference_batch=256"]).train
    assert lr_factor(cfg, world_size=2) == pytest.approx(1.0)  # 64 x 2 x 2 = 256
    assert lr_factor(cfg, world_size=4) == pytest.approx(2.0)
    cfg.lr_scaling = "sqrt"
    assert lr_factor(cfg, world_size=8) == pytest.approx(2.0)
    cfg.lr_scaling = "none"
    assert lr_factor(cfg, world_size=8) == 1.0


def test_lr_scaling_reaches_the_optimizer_and_a_schedule_with_its_own_peak():
    from fastpipe.train import graph
    from fastpipe.job.graph_text import describe

    settings = make_settings(TINY + ["train.lr_scaling=linear", "train.lr_reference_batch=8", "optimizer=sgd",
                                     "optimizer.lr=0.1", "lr_schedule=onecycle"])
    g = graph.build(settings, cpu_runtime())
    assert g.optimizer.param_groups[0]["max_lr"] == pytest.approx(settings.lr_schedule.params["max_lr"] * 2)
    assert "lr_scaling=linear: x2 for a global batch of 16 against 8" in describe(g, settings)
    plain = graph.build(make_settings(TINY + ["optimizer=sgd", "optimizer.lr=0.1"]), cpu_runtime())
    assert plain.optimizer.param_groups[0]["initial_lr"] == pytest.approx(0.1)
