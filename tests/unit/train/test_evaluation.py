"""Held-out evaluation: early stopping, the best evaluation, evaluation in lockstep over ranks."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from fastpipe.errors import ConfigError
from fastpipe.train import evaluation


# ------------------------------------------------------------------ evaluation, early stopping, best
def scripted_evaluator(monkeypatch, values, higher, patience=2, min_delta=0.0, every=None):
    saved = []
    ckpt = SimpleNamespace(save_weights=lambda g, which, step, ema, metric: saved.append((step, metric)))
    task = SimpleNamespace(primary="m", higher_is_better=higher)
    g = SimpleNamespace(task=task, model=None, held_out=None)
    cfg = SimpleNamespace(eval_every=every, early_stop_patience=patience, early_stop_min_delta=min_delta,
                          eval_batches=None)
    sequence = iter(values)
    monkeypatch.setattr(evaluation, "evaluate", lambda g, model, limit=None: {"m": next(sequence)})
    return evaluation.Evaluator(g, cfg, ckpt), saved


@pytest.mark.parametrize("higher,values,best_step,stop_at", [
    (True, [0.5, 0.7, 0.6, 0.65, 0.8], 2, 4),   # accuracy: best at the 2nd evaluation, 2 without gain -> stop
    (False, [3.0, 2.0, 2.5, 1.0, 1.5, 1.6], 4, 6),  # a loss: lower is better; improves again at the 4th
])
def test_early_stopping_stops_at_the_right_evaluation_and_keeps_the_best(monkeypatch, higher, values, best_step,
                                                                         stop_at):
    evaluator, saved = scripted_evaluator(monkeypatch, values, higher)
    for step in range(1, len(values) + 1):
        evaluator.run(step)
        if evaluator.stop:
            break
    assert step == stop_at and evaluator.best["step"] == best_step
    assert saved[-1] == (best_step, {"m": values[best_step - 1]})  # best.pt written when it improved, only then


def test_a_resumed_evaluator_keeps_the_best_and_the_patience_count(monkeypatch):
    """A resume continues from the checkpoint's Position.evaluation: a worse result does not replace
    best.pt, and evaluations without gain before the stop still count."""
    first, saved = scripted_evaluator(monkeypatch, [0.5, 0.7, 0.6], True, patience=2)
    for step in (1, 2, 3):
        first.run(step)
    state = first.state()
    assert {k: state[k] for k in ("best", "since_best")} == {"best": {"step": 2, "value": 0.7, "metrics": {"m": 0.7}},
                                                           "since_best": 1}  # the run's clock travels beside them
    resumed, saved_after = scripted_evaluator(monkeypatch, [0.65], True, patience=2)
    resumed.__init__(resumed.g, resumed.cfg, resumed.ckpt, resumed.ema, resumed=state)
    resumed.run(4)
    assert saved_after == [] and resumed.best["step"] == 2 and resumed.stop


def test_min_delta_and_eval_every(monkeypatch):
    evaluator, saved = scripted_evaluator(monkeypatch, [0.5, 0.505, 0.51], True, patience=2,
                                          min_delta=0.02, every=10)
    for step in (10, 20, 30):
        evaluator.run(step)
    assert evaluator.stop and len(saved) == 1 and evaluator.due(20) and not evaluator.due(25)


class _Ranks:
    """What held_out_pass.in_lockstep needs of a graph: other ranks simulated by fixed answers."""

    def __init__(self, world: int, having: int, others_more: list) -> None:
        self.dist, self.world_size = self, world  # HeldOut.dist: these ranks' collectives
        self.device = torch.device("cpu")
        self.having, self.others_more = having, list(others_more)

    def all_reduce_sum(self, t):
        return torch.tensor([float(self.having)])

    def any_rank(self, flag):  # one answer of the other rank per call
        other = self.others_more.pop(0) if self.others_more else False
        return torch.tensor(bool(flag) or other)


def test_evaluation_in_lockstep_repeats_the_last_batch_uncounted_while_others_go_on():
    from fastpipe.train.held_out import in_lockstep

    pairs = list(in_lockstep(_Ranks(2, 2, [False, True, True, False]), iter(["a", "b"])))
    assert pairs == [("a", True), ("b", True), ("b", False), ("b", False)]
    with pytest.raises(ConfigError, match="no batch"):
        list(in_lockstep(_Ranks(2, 1, []), iter(["a"])))
    assert list(in_lockstep(_Ranks(2, 0, []), iter([]))) == []


def test_the_splits_last_smaller_batch_is_evaluated_without_cudnn_autotuning():
    """A held-out split's last batch is a shape met once per evaluation: autotuning every convolution for
    it would cost seconds on a GPU, so it runs with cuDNN's benchmark mode off (and on again after)."""
    from fastpipe.stages.precision import build_fp32
    from fastpipe.config import PrecisionConfig
    from fastpipe.train.held_out import HeldOut
    from fastpipe.train.held_out import evaluate

    seen = []

    class Spy(torch.nn.Module):
        def forward(self, x):
            seen.append((x.shape[0], torch.backends.cudnn.benchmark))
            return torch.nn.functional.one_hot(torch.zeros(x.shape[0], dtype=torch.long), 2).float()

    batches = [(torch.zeros(4, 1), torch.zeros(4, dtype=torch.long)) for _ in range(2)]
    batches.append((torch.zeros(3, 1), torch.zeros(3, dtype=torch.long)))
    task = SimpleNamespace(metrics=lambda out, y: {"accuracy": (out.argmax(1) == y).float().sum()})
    held = HeldOut(batches, task, build_fp32(PrecisionConfig(name="fp32"), torch.device("cpu")), torch.device("cpu"))
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        metrics = evaluate(held, Spy())
    finally:
        torch.backends.cudnn.benchmark = before
    assert seen == [(4, True), (4, True), (3, False)] and metrics == {"accuracy": 1.0}
