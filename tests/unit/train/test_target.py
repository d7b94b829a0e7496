"""train.target and train.target_eval_samples on real in-process runs (issue 22); train.time_budget_s:
test_time_budget.py."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import TINY, cpu_runtime, make_settings, run_in_process, shapes_splits

from fastpipe.record.run_record import SCHEMA_VERSION

from ..conftest import composed, run_composed

TARGET = TINY + ["train.max_steps=60", "train.eval_every=2", "train.target=0.6", "train.target_eval_samples=24"]


def parts_add_up(breakdown: dict) -> None:
    parts = [breakdown[k] for k in ("setup", "compile", "train", "eval", "checkpoint")]
    assert min(parts) >= 0.0, breakdown
    assert sum(parts) == pytest.approx(breakdown["wall_s"], rel=0.02), breakdown


def test_a_reached_target_stops_the_run_at_the_confirming_evaluation(tmp_path):
    m = run_in_process(tmp_path, TARGET)
    t = m["target"]
    assert m["status"] == "ok" and m["schema_version"] == SCHEMA_VERSION and m["stopped_by"] == "target", m.get("reason")
    assert t["reached"] and t["reached_value"] >= 0.6 and t["metric"] == "accuracy" and t["eval_samples"] == 24
    assert m["steps"] == t["steps"] < 60 and t["samples"] == t["steps"] * 16  # stopped at that evaluation
    assert t["seconds_end_to_end"] > t["seconds"] > 0
    full = [c for c in t["curve"] if not c["subset"]]
    assert full[-1] == {"step": t["steps"], "seconds": t["seconds"], "value": t["reached_value"], "subset": False}
    assert all(c["value"] < 0.6 for c in full[:-1])  # the first whole-split evaluation at the target counts
    steps_per_epoch = (240 - len_val()) // 16
    for c in t["curve"]:
        if c["subset"]:  # a subset hit is confirmed on the whole split at once, a miss never is
            confirmed = any(f["step"] == c["step"] for f in full)
            assert confirmed == (c["value"] >= 0.6) or c["step"] % steps_per_epoch == 0, t["curve"]
    assert [c["seconds"] for c in t["curve"]] == sorted(c["seconds"] for c in t["curve"])
    assert m["val_metrics"]["accuracy"] == t["reached_value"] and m["compile_cache"] is None
    parts_add_up(m["time_breakdown_s"])
    assert m["time_breakdown_s"]["eval"] > 0 and m["time_breakdown_s"]["checkpoint"] > 0  # best.pt
    setup_parts_add_up(m)


def setup_parts_add_up(m: dict) -> None:
    """setup_parts_s: every part, each measured, adding up to the set-up before the first step; the
    summary names the largest."""
    from fastpipe.measure.setup import PARTS
    from fastpipe.record.run_record import RunRecord
    from fastpipe.record.summary import summary_text

    parts, t = m["setup_parts_s"], m["target"]
    assert list(parts) == list(PARTS) and min(parts.values()) >= 0.0, parts
    assert sum(parts.values()) == pytest.approx(t["seconds_end_to_end"] - t["seconds"], abs=0.01), parts
    assert all(parts[k] > 0 for k in ("dataset_index", "loader_start", "model_build", "first_batch_check")), parts
    largest = max(parts, key=parts.get)
    assert f"setup {m['time_breakdown_s']['setup']:.2f} (largest: {largest} {parts[largest]:.2f})" in \
        summary_text(RunRecord.from_dict(m))


def len_val() -> int:
    return len(shapes_splits(num_images=240, image_size=16).val)


def test_the_target_subset_is_class_balanced_drawn_with_the_seed_and_the_same_at_every_evaluation():
    from fastpipe.data import build_loader
    from fastpipe.data.held_out_batches import eval_subset

    splits = shapes_splits(num_images=240, image_size=16)  # its held-out split lists the images class by class
    labels = splits.val.targets
    subset = eval_subset(splits.val, 20, seed=0)
    assert sorted(np.bincount([labels[i] for i in subset]).tolist()) == [5, 5, 5, 5]  # 4 classes, 5 each
    assert np.array_equal(subset, eval_subset(splits.val, 20, seed=0))  # the same subset every time
    assert not np.array_equal(subset, eval_subset(splits.val, 20, seed=1))  # another seed, another draw
    loader = build_loader(make_settings(TINY).data, splits, cpu_runtime(), 16, 0, train=False, channels_last=False,
                          subset=subset)
    read = [[int(y) for _, ys in loader for y in ys] for _ in range(2)]  # two evaluations
    assert read[0] == read[1] == [labels[i] for i in subset]


@pytest.mark.parametrize("patience", [None, 50])
def test_epoch_ends_are_screened_by_the_subset_and_the_last_evaluation_is_whole(patience, tmp_path):
    """With a target's subset, an epoch's end is screened as a periodic evaluation is (the whole split only
    on a hit); the run's last evaluation is whole; with early stopping, which counts whole evaluations,
    every epoch's end is whole."""
    steps_per_epoch = (240 - len_val()) // 16
    args = TINY + ["train.max_steps=null", "train.epochs=2", "train.eval_every=4", "train.target=1.0",
                   "train.target_eval_samples=24", "optimizer.lr=0.0001"]  # far from 100 %: never reached
    m = run_in_process(tmp_path, args + ([f"train.early_stop_patience={patience}"] if patience else []))
    curve = m["target"]["curve"]
    assert m["status"] == "ok" and not m["target"]["reached"] and m["steps"] == 2 * steps_per_epoch, m.get("reason")
    whole = [c["step"] for c in curve if not c["subset"]]
    ends = [steps_per_epoch, 2 * steps_per_epoch]
    assert whole == (ends if patience else [ends[-1]]), curve
    screened = {c["step"] for c in curve if c["subset"]}
    assert set(range(4, ends[-1], 4)) - set(ends) <= screened  # every periodic evaluation screened
    assert (set(ends[:-1]) <= screened) != bool(patience), curve
    assert m["val_metrics"]["accuracy"] == curve[-1]["value"]  # the metrics that count: the last, whole one


def test_a_target_subset_as_large_as_the_held_out_split_is_refused_before_training(tmp_path):
    from fastpipe.errors import ConfigError

    held = len_val()
    with pytest.raises(ConfigError, match=rf"train.target_eval_samples={held} is not fewer than the {held} held-out "
                                          rf"samples of dataset=shapes: .* lower it below {held}"):
        run_in_process(tmp_path, TINY + ["train.eval_every=2", "train.target=0.6", f"train.target_eval_samples={held}"])


def test_a_stopped_run_keeps_its_best_and_its_target_curve_so_far(tmp_path):
    from fastpipe.errors import Preempted
    from fastpipe.record.results import read as read_metrics

    with pytest.raises(Preempted):
        run_in_process(tmp_path, TINY + ["train.max_steps=60", "train.eval_every=2", "train.target=1.0",
                                         "model._target_=fault_models.SignalsAt", "+model.after=7"])
    m = read_metrics(tmp_path)
    assert m["status"] == "preempted" and m["steps"] == 8, m.get("reason")
    full = [c for c in m["target"]["curve"] if not c["subset"]]
    assert [c["step"] for c in full] == [2, 4, 6] and not m["target"]["reached"]  # step 8 stopped before evaluating
    assert m["best"]["value"] == max(c["value"] for c in full) == m["target"]["best_value"]


# reached at a periodic evaluation (step 12, 11 steps an epoch), or at an epoch's end (step 11)
@pytest.mark.parametrize("eval_every,target", [(2, 0.8), (11, 0.6)])
def test_a_run_that_reached_its_target_trains_nothing_when_resumed_and_keeps_its_record(eval_every, target, tmp_path,
                                                                                         capfd):
    """The same ``train.resume=auto`` command again: its checkpoint says the target was reached, so
    nothing trains and metrics.json stays the finished record. A harder target trains on from there."""
    from fastpipe.record.results import read as read_metrics

    args = TINY + ["train.max_steps=30", f"train.eval_every={eval_every}", f"train.target={target}",
                   "train.checkpoint_every=100", "train.resume=auto"]
    first = run_composed(tmp_path, args)
    assert first["stopped_by"] == "target" and first["target"]["reached"], first.get("reason")
    capfd.readouterr()
    again = run_composed(tmp_path, args)  # the same command again
    err = capfd.readouterr().err
    assert f"train.target={target:g} was reached at step {first['steps']}" in err and "nothing to train" in err, err
    kept = read_metrics(tmp_path)
    for key in ("status", "steps", "target", "best", "stopped_by", "throughput", "val_metrics", "time_breakdown_s"):
        assert again[key] == kept[key] == first[key], key
    if eval_every == 2:  # an easier target: judged on the same curve, reached earlier, nothing to train either
        easier = run_in_process(tmp_path, [*args, "train.target=0.3"])
        reached = next(c for c in first["target"]["curve"] if c["value"] >= 0.3)
        assert easier["status"] == "ok" and easier["steps"] == first["steps"] and easier["stopped_by"] == "target"
        assert easier["target"]["steps"] == reached["step"] < first["steps"] and easier["throughput"] is None
        assert "train.target=0.3 was reached at step" in easier["reason"]

    harder = run_in_process(tmp_path, [*args, "train.target=0.999", f"train.max_steps={first['steps'] + 4}"])
    t, curve = harder["target"], first["target"]["curve"]
    assert harder["status"] == "ok" and t["value"] == 0.999, harder.get("reason")
    assert any(f"at step {first['steps']} " in w for w in harder["warnings"])
    assert harder["steps"] > first["steps"] and harder["per_rank"]["steps_run"] == [harder["steps"] - first["steps"]]
    assert t["curve"][:len(curve)] == curve and len(t["curve"]) > len(curve)
    steps = [c["step"] for c in t["curve"] if not c["subset"]]
    assert steps == sorted(set(steps)), steps  # no evaluation at the resumed step a second time
    assert not t["reached"] or t["steps"] > first["steps"]


def test_a_run_stopped_early_trains_nothing_when_resumed_with_the_same_patience(tmp_path, capfd):
    from fastpipe.record.results import read as read_metrics

    args = TINY + ["train.max_steps=40", "train.eval_every=1", "train.early_stop_patience=1",
                   "train.early_stop_min_delta=0.5", "train.checkpoint_every=100", "train.resume=auto"]
    first = run_composed(tmp_path, args)  # no evaluation gains 0.5 on the first: stopped at the second
    assert first["stopped_by"] == "early_stop" and first["steps"] == 2, first.get("reason")
    again = run_composed(tmp_path, args)  # the same command again
    assert "shows early stopping: accuracy gained nothing for 1 evaluations" in capfd.readouterr().err
    assert again == {**read_metrics(tmp_path)} and again["throughput"] == first["throughput"]
    assert again["steps"] == 2 and again["best"] == first["best"]
    longer = run_in_process(tmp_path, [*args, "train.early_stop_patience=3"])  # more patience: trains on
    assert longer["stopped_by"] == "early_stop" and longer["steps"] == 4


def test_with_eval_batches_a_target_is_reached_only_on_the_whole_split(tmp_path):
    """train.eval_batches evaluates the first batches only: with a target those evaluations screen, and
    the reached claim is the whole split's (the weights it stopped with, evaluated on every sample)."""
    import torch

    from fastpipe.train import graph
    from fastpipe.train.held_out import evaluate

    args = TINY + ["train.max_steps=60", "train.eval_every=2", "train.target=0.6", "train.eval_batches=1"]
    m = run_composed(tmp_path, args)
    t = m["target"]
    assert m["status"] == "ok" and t["reached"], m.get("reason")
    assert any(c["subset"] for c in t["curve"])  # the one-batch evaluations screened
    settings = composed(args)  # the run's own settings
    g = graph.build(settings, cpu_runtime())
    g.model.load_state_dict(torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)["model"])
    whole = evaluate(graph.build_held_out(settings, cpu_runtime(), g.dataset), g.model)["accuracy"]
    assert t["reached_value"] == pytest.approx(whole, abs=1e-6) and whole >= 0.6
