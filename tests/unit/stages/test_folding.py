"""train.eval_fold: the folded evaluation copy computes what the model computes, follows its weights,
falls back when it cannot trace or fails its check; and the screen's kept batches (data/held_out_batches.py)."""
from __future__ import annotations

import warnings

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from fastpipe.config import PrecisionConfig
from fastpipe.data import held_out_batches
from fastpipe.data.held_out_batches import KeptBatches
from fastpipe.errors import FastpipeWarning
from fastpipe.stages import eval_forward
from fastpipe.stages.eval_forward import EvalForwards
from fastpipe.stages.folding import FoldedConv, fold, fold_weights
from fastpipe.stages.precision import build_fp32
from fastpipe.train import held_out
from fastpipe.train.held_out import HeldOut

CPU = torch.device("cpu")


def settled(model: nn.Module) -> nn.Module:
    """``model`` with BatchNorm statistics that are not the initial 0 / 1, in eval mode."""
    torch.manual_seed(0)
    with torch.no_grad():
        for _ in range(2):
            model(torch.randn(8, 3, 32, 32))
    return model.eval()


class Branchy(nn.Module):
    """conv-bn-F.relu, conv-bn alone, conv-bn + residual -> torch.relu, and a conv whose output is read twice."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.bn_a = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.b, self.bn_b = nn.Conv2d(8, 8, 1, bias=False), nn.BatchNorm2d(8)
        self.c, self.bn_c = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8, affine=False)
        self.d, self.bn_d = nn.Conv2d(8, 8, 1), nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        x = F.relu(self.bn_a(self.a(x)))
        y = self.bn_b(self.b(x))
        z = torch.relu(self.bn_c(self.c(y)) + x)
        d = self.d(z)  # read twice: its BatchNorm cannot be folded into it
        return self.head((self.bn_d(d) + d).mean((2, 3)))


@pytest.mark.parametrize("make,pairs,left", [(lambda: torchvision.models.resnet18(num_classes=5), 20, 0),
                                             (Branchy, 3, 1)])
def test_the_folded_copy_computes_what_the_model_computes(make, pairs, left):
    model = settled(make())
    gm, units = fold(model, None)
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(gm(x), model(x), atol=1e-5, rtol=1e-4)
    assert len(units) == pairs and all(isinstance(u, FoldedConv) for u in units)
    modules = dict(gm.named_modules())
    assert sum(n.op == "call_module" and isinstance(modules[n.target], nn.BatchNorm2d) for n in gm.graph.nodes) == left


def test_the_cuda_rewrite_fuses_only_chains_that_end_in_a_relu(monkeypatch):
    """On CUDA the folded pairs are cuDNN's conv+bias+ReLU and conv+bias+add+ReLU calls; stand-ins that
    compute the same let the rewrite run here, in fp32."""
    calls = []

    def conv_relu(x, w, b, stride, padding, dilation, groups):
        calls.append("relu")
        return F.relu(F.conv2d(x, w, b, stride, padding, dilation, groups))

    def conv_add_relu(x, w, z, alpha, b, stride, padding, dilation, groups):
        calls.append("add_relu")
        return F.relu(F.conv2d(x, w, b, stride, padding, dilation, groups) + alpha * z)

    monkeypatch.setattr(torch, "cudnn_convolution_relu", conv_relu)
    monkeypatch.setattr(torch, "cudnn_convolution_add_relu", conv_add_relu)
    model = settled(torchvision.models.resnet18(num_classes=5))
    gm, units = fold(model, torch.float32)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        fold_weights(units)
        assert torch.allclose(gm(x), model(x), atol=1e-5, rtol=1e-4)
    # resnet18: 17 pairs end in a ReLU (8 of them after the residual add); the 3 downsample pairs stay
    assert len(units) == 17 and calls.count("add_relu") == 8 and calls.count("relu") == 9


def test_each_evaluation_folds_the_current_weights():
    model = settled(torchvision.models.resnet18(num_classes=5))
    forwards = EvalForwards(True, CPU, None)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        forwards(model)(x)
        for m in model.modules():  # a training step and new statistics, in place
            if isinstance(m, (nn.Conv2d, nn.BatchNorm2d)):
                m.weight.mul_(1.1)
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.add_(0.05)
        assert torch.allclose(forwards(model)(x), model(x), atol=1e-5, rtol=1e-4)


def test_a_copy_that_fails_its_check_gives_way_to_the_model(monkeypatch):
    model = settled(torchvision.models.resnet18(num_classes=5))
    forwards = EvalForwards(True, CPU, None)
    real = eval_forward.fold_weights
    monkeypatch.setattr(eval_forward, "fold_weights", lambda units: (real(units), [u.bias.add_(1.0) for u in units]))  # a wrong fold
    x = torch.randn(2, 3, 32, 32)
    calls = []
    model.register_forward_hook(lambda *_: calls.append(torch.is_autocast_enabled("cpu")))
    with torch.no_grad(), pytest.warns(FastpipeWarning, match="failed its check.*differed"):
        first = forwards(model)(x)
    assert len(calls) == 2  # its outputs, then the model without autocast for the precision's own difference
    assert torch.equal(first, model(x)) and forwards(model) is model
    assert "failed its check" in forwards.describe()


def test_a_copy_within_the_floor_passes_without_the_precisions_own_difference():
    """A gap at most FLOOR passes whatever the precision's own difference is, so the model's forward
    without autocast (new cuDNN plans on a GPU) is not run for it."""
    model = settled(torchvision.models.resnet18(num_classes=5))
    forwards = EvalForwards(True, CPU, None)
    calls = []
    model.register_forward_hook(lambda *_: calls.append(1))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", FastpipeWarning)
        forwards(model)(torch.randn(2, 3, 32, 32))
    assert len(calls) == 1 and forwards(model) is not model and "failed" not in forwards.describe()


@pytest.mark.parametrize("own, gap, passes, words", [(0.01, 0.029, True, None), (0.01, 0.031, False, "3 times"),
                                                     (0.001, 0.006, False, "the floor")])
def test_above_its_floor_the_copy_passes_within_three_times_the_precisions_own(monkeypatch, own, gap, passes, words):
    """A gap above the floor (0.005 in fp32; under bf16 autocast twice bf16's machine epsilon, 0.016) passes
    within three times the precision's own difference and fails beyond it; the warning says which limit."""
    assert EvalForwards(True, CPU, torch.bfloat16).floor == pytest.approx(2 * 2 ** -7)
    assert EvalForwards(True, CPU, None).floor == eval_forward.FLOOR == EvalForwards(True, CPU, torch.float32).floor
    model, forwards = settled(torchvision.models.resnet18(num_classes=5)), EvalForwards(True, CPU, None)
    seq = iter([gap, own])  # the copy against the model, then the model under autocast against fp32
    monkeypatch.setattr(eval_forward, "difference", lambda a, b: next(seq))
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        forwards(model)(torch.randn(2, 3, 32, 32))
    refused = [str(w.message) for w in caught if "failed its check" in str(w.message)]
    assert (not refused) is passes and (passes or words in refused[0]), refused


def test_an_untraceable_model_is_evaluated_as_it_is():
    class DataDependent(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

        def forward(self, x):
            return self.bn(self.conv(x)) if x.sum() > 0 else x

    model = DataDependent().eval()
    forwards = EvalForwards(True, CPU, None)
    forwards.prepare(model)
    assert forwards(model) is model and "could not trace" in forwards.describe()


def test_eval_fold_takes_auto_true_or_false():
    from conftest import make_settings
    from fastpipe.errors import ConfigError

    assert make_settings([]).train.eval_fold == "auto" and make_settings(["train.eval_fold=false"]).train.eval_fold is False
    with pytest.raises(ConfigError) as refused:  # docs/errors/config.md's row, word for word
        make_settings(["train.eval_fold=yes"])
    assert str(refused.value) == "train.eval_fold='yes': use auto, true or false"


def test_auto_folds_on_cuda_only_and_false_never():
    model = settled(torchvision.models.resnet18(num_classes=5))
    auto = EvalForwards("auto", CPU, None)
    assert auto(model) is model and auto.describe() == ""  # graph.txt's loop line as before
    assert EvalForwards(False, CPU, None)(model) is model
    assert EvalForwards(False, CPU, None).describe() == "evaluates the model as it is (train.eval_fold=false)"


def test_an_evaluation_with_the_folded_copy_gives_the_models_metrics():
    model = settled(torchvision.models.resnet18(num_classes=3))
    torch.manual_seed(1)
    batches = [(torch.randn(8, 3, 32, 32), torch.randint(0, 3, (8,))) for _ in range(3)]
    task = SimpleNamespace(metrics=lambda out, y: {"loss": F.cross_entropy(out, y, reduction="sum"),
                                                   "accuracy": (out.argmax(1) == y).float().sum()})
    precision = build_fp32(PrecisionConfig(name="fp32"), CPU)
    plain = held_out.evaluate(HeldOut(batches, task, precision, CPU), model)
    folded = HeldOut(batches, task, precision, CPU, forwards=EvalForwards(True, CPU, None))
    for _ in range(2):  # the first evaluation checks the copy, the second runs it alone
        got = held_out.evaluate(folded, model)
        assert got["accuracy"] == plain["accuracy"] and got["loss"] == pytest.approx(plain["loss"], rel=1e-5)


# ------------------------------------------------------------------ the screen's kept batches
class Reusing:
    """A loader that writes every batch into the same buffer, as DALI and the decode workers' ring do."""

    def __init__(self, n: int) -> None:
        self.n, self.buffer, self.passes = n, torch.zeros(2, 3), 0

    def __len__(self):
        return self.n

    def __iter__(self):
        self.passes += 1
        for i in range(self.n):
            self.buffer.fill_(i)
            yield self.buffer, torch.tensor([i, i])

    def describe(self):
        return "reusing"


def test_the_screen_reads_its_loader_once_and_keeps_copies():
    loader = KeptBatches(Reusing(3))
    first = [x.clone() for x, _ in loader]
    again = [(x, y) for x, y in loader]
    assert loader.passes == 1 and [x[0, 0].item() for x, _ in again] == [0, 1, 2]
    assert all(torch.equal(a, b) for a, (b, _) in zip(first, again)) and loader.describe() == "reusing"


def test_a_pass_left_early_keeps_nothing_and_no_room_keeps_nothing(monkeypatch):
    loader = KeptBatches(Reusing(3))
    next(iter(loader))
    list(loader)
    assert loader.passes == 2 and loader.kept is not None  # the second pass was whole
    monkeypatch.setattr(held_out_batches, "free_bytes", lambda device: 10)
    tight = KeptBatches(Reusing(3))
    list(tight), list(tight)
    assert tight.passes == 2 and tight.kept is None and tight.refused


def test_each_fold_casts_into_the_first_folds_buffers_in_the_weights_memory_format():
    """A cast copy (the cuDNN call's dtype) is folded into the same buffers at every evaluation, with
    every unit's weights as the model has them then; channels_last weights stay channels_last."""
    model = settled(torchvision.models.resnet18(num_classes=5)).to(memory_format=torch.channels_last)
    gm, units = fold(model, torch.float64)
    buffers = [(u.weight.data_ptr(), u.bias.data_ptr()) for u in units]
    with torch.no_grad():
        for m in model.modules():  # a training step and new statistics, in place
            if isinstance(m, nn.BatchNorm2d):
                m.weight.mul_(1.5)
                m.running_var.add_(0.25)
    fold_weights(units)
    assert [(u.weight.data_ptr(), u.bias.data_ptr()) for u in units] == buffers
    for unit in units:
        conv, bn = unit.parts
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        assert unit.weight.dtype == torch.float64 and unit.weight.is_contiguous(memory_format=torch.channels_last)
        assert torch.allclose(unit.weight, (conv.weight * scale.reshape(-1, 1, 1, 1)).double(), rtol=1e-6, atol=1e-7)
        assert torch.allclose(unit.bias, (bn.bias - bn.running_mean * scale).double(), rtol=1e-6, atol=1e-7)


def test_a_conv_bias_and_an_affine_less_batchnorm_fold_in():
    conv, bn = nn.Conv2d(3, 4, 3, bias=True), nn.BatchNorm2d(4, affine=False)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    unit = FoldedConv(conv, bn, relu=False, add=False, dtype=None)
    fold_weights([unit])
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        assert torch.allclose(unit(x), bn.eval()(conv(x)), atol=1e-5, rtol=1e-4)
