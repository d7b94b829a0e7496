"""The split's last, shorter batch (train/held_out.py): off the CPU it is filled up to the pass's
first batch and its outputs cut back, so an evaluation meets no new batch shape; the metrics are the
same as the batch run as it is; what cannot be filled up or cut back runs as it is."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from fastpipe.config import PrecisionConfig
from fastpipe.data.batches import batch_first, filled_up
from fastpipe.stages.precision import build_fp32
from fastpipe.train import held_out
from fastpipe.train.held_out import HeldOut, evaluate

CPU = torch.device("cpu")
TASK = SimpleNamespace(primary="accuracy", higher_is_better=True,
                       metrics=lambda out, y: {"accuracy": (out.argmax(1) == y).float().sum(),
                                               "loss": torch.nn.functional.cross_entropy(out, y, reduction="sum")})


class Shapes(torch.nn.Module):
    """A linear classifier that records the batch shapes it was called with."""

    def __init__(self, outputs=lambda logits: logits) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear, self.outputs, self.shapes = torch.nn.Linear(6, 3), outputs, []

    def forward(self, x):
        self.shapes.append(tuple(x.shape))
        return self.outputs(self.linear(x))


def split(samples=10, batch=4):
    torch.manual_seed(1)
    x, y = torch.randn(samples, 6), torch.randint(0, 3, (samples,))
    return [(x[i:i + batch], y[i:i + batch]) for i in range(0, samples, batch)]


def held(batches, task=TASK):
    return HeldOut(batches, task, build_fp32(PrecisionConfig(name="fp32"), CPU), CPU)


@pytest.fixture
def off_the_cpu(monkeypatch):
    """The pass as it runs on a GPU: the last batch filled up."""
    monkeypatch.setattr(held_out, "RUNS_SHORT_AS_IS", ())


def test_the_last_batch_is_filled_up_and_the_metrics_are_those_of_the_batch_as_it_is(off_the_cpu):
    batches = split()  # 4, 4, 2
    as_is = Shapes()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(held_out, "RUNS_SHORT_AS_IS", ("cpu",))
        expected = evaluate(held(batches), as_is)
    assert as_is.shapes == [(4, 6), (4, 6), (2, 6)]
    model = Shapes()
    got = evaluate(held(batches), model)
    assert model.shapes == [(4, 6)] * 3  # no new shape
    assert got == pytest.approx(expected)


def test_on_the_cpu_the_last_batch_runs_as_it_is():
    model = Shapes()
    evaluate(held(split()), model)
    assert model.shapes == [(4, 6), (4, 6), (2, 6)]


def test_outputs_that_are_not_batch_first_run_the_last_batch_as_it_is(off_the_cpu):
    """A model whose outputs carry a tensor without the batch first: they could not be cut back."""
    model = Shapes(outputs=lambda logits: (logits, logits.sum()))
    task = SimpleNamespace(primary="accuracy", higher_is_better=True,
                           metrics=lambda out, y: {"accuracy": (out[0].argmax(1) == y).float().sum()})
    evaluate(held(split(), task), model)
    assert model.shapes == [(4, 6), (4, 6), (2, 6)]


def test_dict_outputs_are_cut_back(off_the_cpu):
    model = Shapes(outputs=lambda logits: {"logits": logits, "probs": logits.softmax(1)})
    task = SimpleNamespace(primary="accuracy", higher_is_better=True,
                           metrics=lambda out, y: {"accuracy": (out["logits"].argmax(1) == y).float().sum(),
                                                   "n": torch.tensor(float(out["probs"].shape[0]))})
    got = evaluate(held(split(), task), model)
    assert model.shapes == [(4, 6)] * 3
    assert got["n"] == pytest.approx((4 + 4 + 2) / 10)  # each batch's outputs were its own samples'


def test_filled_up_keeps_structure_and_memory_format_and_refuses_what_differs():
    short = torch.randn(3, 2, 4, 4).contiguous(memory_format=torch.channels_last)
    full = torch.randn(5, 2, 4, 4).contiguous(memory_format=torch.channels_last)
    out = filled_up({"x": short, "mask": torch.ones(3, 4)}, {"x": full, "mask": torch.zeros(5, 4)}, 5)
    assert out["x"].is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out["x"][:3], short) and torch.equal(out["x"][3:], full[:2])
    assert out["mask"].tolist() == [[1.0] * 4] * 3 + [[0.0] * 4] * 2
    assert filled_up(short, full.double(), 5) is None  # another dtype
    assert filled_up(torch.randn(3, 2, 4, 5), full, 5) is None  # another sample shape
    assert filled_up((short, "ids"), (full, "ids"), 5) is None  # a leaf that is no tensor
    assert batch_first((torch.zeros(5, 2), torch.zeros(5)), 5) and not batch_first(torch.zeros(()), 5)
