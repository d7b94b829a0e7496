"""The training recipe: schedules, parameter groups, clipping, EMA, evaluation when asked, early
stopping, the best weights, the model back in your code, streaming data."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from conftest import HERE_TESTS, REPO, compose, make_settings, run_in_process
from omegaconf import OmegaConf
from test_checkpoint import BASE

from fastpipe.record.notes import collect_warnings
from fastpipe.train import evaluation
from fastpipe.stages.ema import build_ema
from fastpipe.stages.optim import build_optimizer, clip_gradients
from fastpipe.stages.schedules import build_schedule

STREAM = [f"hydra.searchpath=[file://{HERE_TESTS / 'conf'}]", "dataset=stream", "model._target_=fault_models.TabularNet",
          "train.batch_size=8", "data.num_workers=0", "measure.warmup_steps=2", "measure.window=3",
          "runtime.progress=false"]


# ------------------------------------------------------------------ schedules and parameter groups
def schedule_of(overrides, total=20):
    settings = make_settings(overrides)
    model = torch.nn.Linear(3, 2)
    opt = build_optimizer(settings.optimizer, settings.train, model, torch.device("cpu"))
    return build_schedule(settings.lr_schedule, opt, total), opt


def lrs(schedule, opt, steps):
    out = []
    for step in range(steps):
        schedule.set(step)
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        schedule.after_step()
    return out


def test_cosine_warms_up_then_decays_and_constant_holds():
    schedule, opt = schedule_of(["optimizer.lr=0.1", "lr_schedule.warmup_steps=4"])
    got = lrs(schedule, opt, 20)
    assert got[:4] == pytest.approx([0.025, 0.05, 0.075, 0.1])
    assert got[12] == pytest.approx(0.1 * 0.5 * (1 + math.cos(math.pi * 8 / 16)))
    schedule, opt = schedule_of(["optimizer.lr=0.02", "lr_schedule=constant"])
    assert set(lrs(schedule, opt, 10)) == {0.02}
    floor, opt = schedule_of(["optimizer.lr=0.1", "lr_schedule.min_lr_ratio=0.1"], total=10)
    assert lrs(floor, opt, 11)[-1] == pytest.approx(0.01)


def test_a_torch_scheduler_is_stepped_and_given_the_run_length():
    schedule, opt = schedule_of(["lr_schedule=onecycle", "lr_schedule.max_lr=0.5"], total=40)
    assert schedule.stateful and schedule.scheduler.total_steps == 40
    got = lrs(schedule, opt, 40)
    assert max(got) == pytest.approx(0.5, rel=0.02) and got[-1] < got[0]
    state = schedule.state_dict()
    again, opt2 = schedule_of(["lr_schedule=onecycle", "lr_schedule.max_lr=0.5"], total=40)
    with collect_warnings([]) as warnings:
        again.resume(state, 40)
    assert again.scheduler.last_epoch == schedule.scheduler.last_epoch and warnings == []


def test_a_torch_scheduler_resumed_into_a_longer_run_follows_the_new_length():
    """OneCycleLR restored as saved would step past its old end (ValueError) in a run given more steps."""
    onecycle = ["lr_schedule=onecycle", "lr_schedule.max_lr=0.5"]
    first, opt = schedule_of(onecycle, total=20)
    lrs(first, opt, 10)
    longer, opt2 = schedule_of(onecycle, total=40)
    with collect_warnings([]) as warnings:
        longer.resume(first.state_dict(), 10)
    fresh, opt3 = schedule_of(onecycle, total=40)
    assert lrs(longer, opt2, 30) == pytest.approx(lrs(fresh, opt3, 40)[10:])
    assert len(warnings) == 1 and "ran over 20 steps" in warnings[0] and "resumes at step 10" in warnings[0]


def test_old_schedule_keys_still_work_with_a_warning():
    settings = make_settings(["train.lr_schedule=constant", "train.lr_warmup_steps=3"])
    assert settings.lr_schedule.target == "fastpipe.stages.schedules.constant"
    assert settings.lr_schedule.params["warmup_steps"] == 3
    assert any("lr_schedule=constant lr_schedule.warmup_steps=3" in d for d in settings.deprecations)


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


def test_a_run_with_clipping_logs_the_norm_and_skips_an_overflow(tmp_path):
    m = run_in_process(tmp_path, BASE + ["train.max_steps=6", "train.checkpoint_every=0", "train.clip_grad_norm=0.5"])
    assert m["status"] == "ok" and m["grad_norm"] is not None and m["grad_norm"] > 0
    assert "clip_grad_norm=0.5" in (tmp_path / "graph.txt").read_text()


# ------------------------------------------------------------------ EMA
def test_ema_equals_a_hand_computation():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    ema = build_ema(model, 0.9)
    hand = None
    for step in range(5):
        with torch.no_grad():
            model[0].weight.add_(torch.randn_like(model[0].weight))
        model(torch.randn(8, 3))  # BatchNorm's running statistics move too
        ema.update_parameters(model)
        now = [t.detach().clone() for t in list(model.parameters()) + list(model.buffers()) if t.is_floating_point()]
        hand = now if hand is None else [0.9 * h + 0.1 * n for h, n in zip(hand, now)]
    mine = [t for t in list(ema.module.parameters()) + list(ema.module.buffers()) if t.is_floating_point()]
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(mine, hand))
    assert ema.count == 5 and int(ema.n_averaged) == 5


def test_a_run_with_ema_reports_the_averages_metrics_and_the_raw_ones(tmp_path):
    m = run_in_process(tmp_path, BASE + ["train.max_steps=8", "train.checkpoint_every=0", "train.ema_decay=0.5"])
    assert m["status"] == "ok" and m["weights"] == "ema"
    assert set(m["val_metrics"]) == set(m["val_metrics_raw"]) == {"accuracy", "loss"}
    saved = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)
    assert saved["weights"] == "ema" and saved["raw_model"] is not None


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


def test_early_stopping_ends_a_real_run_and_best_pt_survives_rotation(tmp_path):
    m = run_in_process(tmp_path, BASE + ["train.epochs=20", "train.eval_every=2", "train.early_stop_patience=2",
                                         "train.checkpoint_every=1", "train.keep_checkpoints=1",
                                         "optimizer.lr=1e-5"])  # too small a rate to improve: stops early
    assert m["status"] == "ok" and m["stopped_early"] and m["steps"] < 20 * 9
    best = torch.load(tmp_path / "checkpoints" / "best.pt", weights_only=True)
    assert best["step"] == m["best"]["step"] and best["metric"]["accuracy"] == pytest.approx(m["best"]["value"])
    assert len(list((tmp_path / "checkpoints").glob("step-*.pt"))) == 1  # rotation kept one, and best.pt


# ------------------------------------------------------------------ the model back in your code
def test_load_gives_the_trained_model_and_evaluate_reproduces_its_metrics(tmp_path):
    import fastpipe
    from fastpipe.cli.evaluate import main as evaluate_main

    overrides = BASE + ["train.max_steps=9", "train.checkpoint_every=0"]
    m = run_in_process(tmp_path, overrides)
    (tmp_path / ".hydra").mkdir()  # what python -m fastpipe writes beside the run (run_in_process does not)
    OmegaConf.save(compose(overrides), tmp_path / ".hydra" / "config.yaml")
    last = fastpipe.load(tmp_path, "last")
    assert last.step == 9 and last.weights == "raw" and not last.model.training
    saved = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(v, saved[k]) for k, v in last.model.state_dict().items())
    assert type(last.config).__name__ == "Config" and last.config.model.target == "fastpipe.models.TinyCNN"
    assert evaluate_main([str(tmp_path), "--weights", "last"]) == 0
    got = json.loads((tmp_path / "eval.json").read_text())
    assert got["metrics"]["accuracy"] == pytest.approx(m["val_metrics"]["accuracy"])
    assert got["metrics"]["loss"] == pytest.approx(m["val_metrics"]["loss"], rel=1e-5)
    best = fastpipe.load(tmp_path)  # which="best": the best evaluation's weights
    assert best.step == m["best"]["step"]


# ------------------------------------------------------------------ streams
def test_a_stream_shard_gives_each_sample_to_one_reader():
    from stream_data import CountingStream

    from fastpipe.data.streams import Shard

    stream = CountingStream(size=40)
    seen = []
    for rank in range(2):
        shard = Shard(stream, rank, world=2, workers=1, quota_per_worker=16)
        seen += [int(x[0]) for x, _ in shard]
    assert len(seen) == 32 and len(set(seen)) == 32
    held = [int(x[0]) for rank in range(2) for x, _ in Shard(stream, rank, 2, 1, None)]
    assert sorted(held) == list(range(40))


def test_a_stream_trains_in_one_process_and_is_refused_by_mmap(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE_TESTS))
    m = run_in_process(tmp_path, STREAM + ["train.epochs=2"])
    assert m["status"] == "ok" and m["steps"] == 2 * (96 // 8) and m["val_metrics"] is not None
    assert "a stream (IterableDataset)  samples/epoch=96" in (tmp_path / "graph.txt").read_text()
    from fastpipe.errors import ConfigError

    with pytest.raises(ConfigError, match="data=mmap reads samples by index, but dataset=.* is a stream"):
        run_in_process(tmp_path / "b", [o for o in STREAM if not o.startswith("data.")] + ["data=mmap"])


@pytest.mark.slow
def test_a_stream_trains_under_ddp(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE_TESTS), str(REPO)]))
    proc = subprocess.run([sys.executable, "-m", "fastpipe", *STREAM, "launcher=ddp", "launcher.nproc_per_node=2",
                           "train.epochs=2", f"hydra.run.dir={tmp_path}"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["status"] == "ok" and m["steps"] == 2 * (96 // 2 // 8) and m["env"]["world_size"] == 2
