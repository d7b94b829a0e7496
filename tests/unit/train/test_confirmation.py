"""A confirmation on the whole split after a screen reached the target (train/evaluation.py): where the
split is kept as the screen's samples and the rest (train/held_out.py SplitInParts), it evaluates the
rest alone and adds the screen's sums, which gives the whole split's metrics; each sample once."""
from __future__ import annotations

from types import SimpleNamespace

import torch

from fastpipe.config import PrecisionConfig
from fastpipe.stages.precision import build_fp32
from fastpipe.train import evaluation
from fastpipe.train.held_out import evaluate, HeldOut, parts_of, SplitInParts

CPU = torch.device("cpu")


class Guess(torch.nn.Module):
    """Predicts class 1 for inputs above 0, else 0; counts the samples it evaluated."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def forward(self, x):
        self.seen += x.shape[0]
        return torch.nn.functional.one_hot((x[:, 0] > 0).long(), 2).float()


def batches(inputs, labels, size=4):
    x, y = torch.tensor(inputs, dtype=torch.float32)[:, None], torch.tensor(labels)
    return [(x[i:i + size], y[i:i + size]) for i in range(0, len(y), size)]


def evaluator(screen, rest, target=0.75):
    task = SimpleNamespace(primary="accuracy", higher_is_better=True, bounds=(0.0, 1.0),
                           metrics=lambda out, y: {"accuracy": (out.argmax(1) == y).float().sum(),
                                                   "loss": torch.nn.functional.cross_entropy(out, y, reduction="sum")})
    held = HeldOut(SplitInParts(screen, rest), task, build_fp32(PrecisionConfig(name="fp32"), CPU), CPU)
    model = Guess()
    g = SimpleNamespace(task=task, model=model, held_out=held, target_held_out=parts_of(held)[0],
                        target_rest=parts_of(held)[1])
    cfg = SimpleNamespace(eval_every=1, early_stop_patience=None, early_stop_min_delta=0.0, eval_batches=None,
                          target=target, target_eval_samples=8, target_screen_risk=0.001)
    ckpt = SimpleNamespace(save_weights=lambda *a: None)
    return evaluation.Evaluator(g, cfg, ckpt), model, held


def test_a_confirmation_evaluates_the_rest_alone_and_gives_the_whole_splits_metrics():
    screen = batches([1, 1, 1, 1, -1, -1, -1, 1], [1, 1, 1, 1, 0, 0, 0, 0])  # 7 of 8 right: a hit
    rest = batches([1, -1, -1, 1, 1, -1], [1, 0, 1, 0, 1, 0])  # 4 of 6 right
    ev, model, held = evaluator(screen, rest)
    metrics = ev.run(3, screened=True)
    assert model.seen == 14  # the screen's 8 and the rest's 6: no sample twice
    whole = evaluate(held, Guess())  # the split read whole, each part one after the other
    assert metrics == whole and metrics["accuracy"] == 11 / 14
    assert [c["subset"] for c in ev.target.curve] == [True, False] and ev.target.reached["value"] == 11 / 14


def test_a_screen_short_of_the_target_is_never_confirmed():
    screen = batches([1, 1, -1, -1, -1, -1, -1, 1], [1, 1, 1, 1, 0, 0, 0, 0])  # 5 of 8: short of 0.75
    rest = batches([1, -1], [1, 0])
    ev, model, _ = evaluator(screen, rest)
    assert ev.run(3, screened=True) is None and model.seen == 8 and ev.target.reached is None
