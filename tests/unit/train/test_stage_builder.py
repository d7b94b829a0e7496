"""The one stage builder (train/graph.py): the batch-size search's probes run the training step
itself, evaluation builds from the same code, and a stage's warning reaches the run's record."""
from __future__ import annotations

import json

import pytest
from conftest import TINY, cpu_runtime, make_settings, run_in_process

from fastpipe.finders import batch_size
from fastpipe.train import graph, step
from fastpipe.train.held_out import evaluate


def test_a_probe_runs_the_training_step_with_accumulation_clipping_and_the_ema(monkeypatch):
    tiny = [o for o in TINY if not o.startswith("train.batch_size")]
    settings = make_settings(tiny + ["train.batch_size=auto", "train.batch_size_max=8", "train.grad_accum=2",
                                     "train.clip_grad_norm=0.5", "train.ema_decay=0.9",
                                     "train.batch_size_goal=throughput"])  # timed steps: samples/s measured
    graphs, micro_batches, clipped = [], [], []
    real_step, real_clip = batch_size.train_step, step.clip_gradients

    def spy_step(g, cfg, next_batch):
        graphs.append(g)
        return real_step(g, cfg, lambda: micro_batches.append(1) or next_batch())

    monkeypatch.setattr(batch_size, "train_step", spy_step)
    monkeypatch.setattr(step, "clip_gradients", lambda *a: clipped.append(1) or real_clip(*a))
    search = batch_size.find_batch_size(settings, cpu_runtime())
    steps = batch_size.WARMUP_STEPS + batch_size.TIMED_STEPS
    assert search.chosen == 8 and [p.batch_size for p in search.probes] == [8]
    assert len(graphs) == steps and len(micro_batches) == 2 * steps and len(clipped) == steps
    g = graphs[0]
    assert g.ema is not None and g.ema.count == steps  # the average is updated by every probed step
    assert g.eval_loader is None and g.runtime.dist.world_size == 1 and next(iter(g.train_loader))[1].shape == (8,)
    assert search.probes[0].samples_per_s > 0


def test_evaluation_builds_from_the_training_graphs_builders():
    settings = make_settings(TINY + ["precision=amp"])
    g = graph.build(settings, cpu_runtime())
    held = graph.build_held_out(settings, cpu_runtime(), g.dataset)  # what python -m fastpipe.evaluate builds
    assert type(held.task) is type(g.task) and held.precision.describe() == g.precision.describe()
    assert len(held.loader) == len(g.eval_loader) and not held.lockstep
    ours, training = evaluate(held, g.model), evaluate(g.held_out, g.model)
    assert set(ours) == {"accuracy", "loss"} and ours == pytest.approx(training)


def test_a_stage_warning_reaches_metrics_json_and_the_printed_summary(tmp_path, capsys):
    m = run_in_process(tmp_path, TINY + ["train.max_steps=4", "compile=off", "compile.compiled_autograd=true"])
    said = "compile=off:  compiled_autograd take(s) effect only with torch.compile (compile=default or another " \
           "mode): ignored"
    recorded = json.loads((tmp_path / "metrics.json").read_text())["warnings"]
    assert m["status"] == "ok" and recorded == m["warnings"] and recorded[0] == said
    assert f"  warning      {said}" in capsys.readouterr().out
