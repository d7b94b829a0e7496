"""optimizer.lr=auto (issue 32): the range test on the run's own step, the rate it gives the run, and
what is recorded (the rules on given curves: tests/unit/finders/test_lr_curve.py)."""
from __future__ import annotations

import csv
import dataclasses
import re
import warnings

import pytest
from conftest import TINY, cpu_runtime, make_settings, run_in_process

from fastpipe.errors import ConfigError, FastpipeWarning, TrainingError
from fastpipe.finders import lr_curve
from fastpipe.finders.lr_curve import ramp
from fastpipe.train import graph
from fastpipe.finders import lr_range

# a ramp over the rates where TinyCNN learns within 20 steps: the default 1e-7..10 over 20 steps is flat, then
# diverges, and is refused (test_lr_curve.py)
AUTO = [*TINY, "optimizer.lr=auto", "train.lr_find_steps=20", "train.lr_find_min=1e-4", "train.lr_find_max=1"]
KEYS = {"rule", "min", "max", "steps", "curve", "diverged_at", "suggestion", "factor", "seconds", "seed",
        "diverge_ratio", "diverge_steps"}


def _found(*extra):
    return lr_range.find_lr(make_settings([*AUTO, *extra]), cpu_runtime())


def test_the_found_rate_trains_as_if_given_unscaled_and_is_recorded(tmp_path, one_torch_thread):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found = run_in_process(tmp_path / "auto", [*AUTO, "optimizer.lr_auto_factor=0.5", "train.lr_scaling=linear"])
    search = found["lr_search"]
    assert found["status"] == "ok" and set(search) == KEYS and (search["rule"], search["steps"]) == ("valley", 20)
    assert search["factor"] == 0.5 and 0 < len(search["curve"]) <= 20 and search["seconds"] > 0
    rate = 0.5 * search["suggestion"]
    assert any("train.lr_scaling=linear does not scale" in w for w in found["warnings"])
    line = next(x for x in (tmp_path / "auto" / "graph.txt").read_text().splitlines() if "optimizer" in x)
    assert f"lr={rate:.3g} (auto: 0.5 x {search['suggestion']:.3g}, the valley of a 20-step range test, " in line
    assert "lr_scaling" not in line  # batch 16 against 256 would have scaled it by 1/16
    with open(tmp_path / "auto" / "lr_find.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [float(r["smoothed_loss"]) for r in rows] == pytest.approx([loss for _, loss in search["curve"]], rel=1e-5)
    assert (tmp_path / "auto" / "lr_find.png").read_bytes()[:4] == b"\x89PNG"
    tb = EventAccumulator(str(tmp_path / "auto" / "tb"))
    tb.Reload()
    points = [(e.step, e.value) for e in tb.Scalars("lr_find/loss")]  # on its own steps, not the training's
    assert points == [(i, pytest.approx(loss, rel=1e-6)) for i, (_, loss) in enumerate(search["curve"])]
    given = run_in_process(tmp_path / "given", [*TINY, f"optimizer.lr={rate!r}"])
    assert given["final_loss"] == found["final_loss"] and given["val_metrics"] == found["val_metrics"]
    assert given["lr_search"] is None


def test_the_schedule_warms_up_to_the_found_rate_and_onecycle_peaks_at_it():
    for schedule, peak_key in (["lr_schedule.warmup_steps=4"], "initial_lr"), (["lr_schedule=onecycle"], "max_lr"):
        settings = lr_range.with_found_lr(make_settings([*AUTO, *schedule]), 0.02)
        g = graph.build(settings, cpu_runtime())
        assert g.optimizer.param_groups[0][peak_key] == 0.02
        if peak_key == "initial_lr":
            g.schedule.set(0)
            assert g.optimizer.param_groups[0]["lr"] == pytest.approx(0.02 / 4)


def test_the_same_seed_gives_the_same_suggestion_and_a_fixed_lr_find_seed_ignores_the_runs():
    """The run of seed 1 with train.lr_find_seed=0 is the range test of seed 0 again (every seed of a race:
    one rate): the same whole record as the run of seed 0, whose range test takes the run's seed."""
    first, again = _found(), _found("seed=1", "train.lr_find_seed=0")
    assert first.record() | {"seconds": 0} == again.record() | {"seconds": 0}
    assert again.curve == first.curve
    assert _found("seed=1").curve != first.curve


def test_batch_size_auto_runs_first_and_the_rate_is_found_at_its_batch(tmp_path, monkeypatch, one_torch_thread):
    seen, built, real, build = [], [], lr_range.find_lr, graph.build_dataset
    monkeypatch.setattr(lr_range, "find_lr", lambda settings, runtime, splits=None: seen.append(
        settings.train.batch_size) or real(settings, runtime, splits))
    monkeypatch.setattr(graph, "build_dataset", lambda *a, **k: built.append(a[2]) or build(*a, **k))
    tiny = [o for o in AUTO if not o.startswith("train.batch_size")]
    m = run_in_process(tmp_path, [*tiny, "train.batch_size=auto", "train.batch_size_max=32", "train.max_steps=2"])
    assert m["status"] == "ok" and seen == [32] == [m["batch_size"]] and m["lr_search"]["steps"] == 20
    assert len(built) == 1  # one dataset for the batch search, the range test and the run
    parts = m["setup_parts_s"]  # each search its own part of the set-up (seconds rounded to 2 and 3 places)
    assert parts["batch_search"] > 0 and parts["lr_search"] >= m["lr_search"]["seconds"] - 0.006 > 0, parts


def test_a_model_that_cannot_train_is_named_and_one_that_diverges_stops_there():
    nan = ["model._target_=fault_models.NaNAfter", "+model.after=0"]
    with pytest.raises(TrainingError, match=r"^model._target_=fault_models.NaNAfter gives a non-finite loss at the "
                                            r"range test's first step \(lr 0.0001.*cannot train at any rate"):
        _found(*nan)
    late = _found("model._target_=fault_models.NaNAfter", "+model.after=17")
    assert late.diverged_at == ramp(1e-4, 1.0, 20)[len(late.curve)] and late.suggestion < late.diverged_at
    with pytest.raises(TrainingError, match=r"^optimizer.lr=auto: the range test's loss diverged after 2 step\(s\), "
                                            r"at lr 0.000264: too few points to read a rate from"):
        _found("model._target_=fault_models.NaNAfter", "+model.after=2")


def test_under_amp_the_test_runs_in_bf16_autocast_and_finds_a_finite_rate():
    found = _found("precision=amp")
    assert 1e-4 < found.suggestion < 1 and len(found.curve) == 20


def test_fsdp_is_refused_and_a_factor_without_auto_is_a_warning():
    with pytest.raises(ConfigError, match="^optimizer.lr=auto with launcher=fsdp: .*set optimizer.lr=RATE$"):
        make_settings([*AUTO, "launcher=fsdp"])  # when the config is read, before any process starts
    given = make_settings([*TINY, "optimizer.lr_auto_factor=3"])
    with pytest.warns(FastpipeWarning, match=r"optimizer.lr_auto_factor=3 .* optimizer.lr=0.003 is given"):
        assert lr_range.settle(given, cpu_runtime()) == (given, None)


def test_the_provisional_rate_stands_in_only_for_auto():
    settings = make_settings(AUTO)
    assert lr_range.provisional(settings).optimizer.params["lr"] == 1e-4 and settings.optimizer.lr_auto
    given = make_settings(TINY)
    assert lr_range.provisional(given) is given
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # lr_scaling=none: nothing to say
        assert dataclasses.asdict(lr_range.with_found_lr(settings, 0.01).optimizer)["params"]["lr"] == 0.01


def test_a_curve_with_no_descent_stops_the_run_before_training_and_leaves_its_curve(tmp_path, one_torch_thread):
    from fastpipe.record import results

    with pytest.raises(lr_range.UnreadableCurve):  # the entry point prints it as one line and exits 2
        run_in_process(tmp_path, [*TINY, "optimizer.lr=auto", "train.lr_find_steps=20"])  # 1e-7..10 in 20 steps
    flat = results.read(tmp_path)
    assert flat["status"] == "failed" and not flat.get("steps")
    assert re.match(r"optimizer.lr=auto: the range test's loss (never fell|fell only [0-9.]+%) .*no rate can be read "
                    r"from it; give the model more steps to learn", flat["reason"])
    with open(tmp_path / "lr_find.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert 10 <= len(rows) <= 20 and [float(r["lr"]) for r in rows] == pytest.approx(ramp(1e-7, 10.0, 20)[:len(rows)], rel=1e-5)


def test_diverged_div10_reads_a_tenth_of_where_the_loss_left_and_needs_it_to_leave():
    found = _found("train.lr_find_rule=diverged_div10", "train.lr_find_min=1e-3", "train.lr_find_max=10")
    assert found.diverged_at is not None and found.suggestion == pytest.approx(found.diverged_at / 10)
    with pytest.raises(TrainingError, match=r"diverged_div10 reads the rate at which the loss diverges, and it did "
                                            r"not diverge up to train.lr_find_max=1; raise train.lr_find_max"):
        _found("train.lr_find_rule=diverged_div10")  # 1e-4..1: TinyCNN's loss does not leave


def test_trial_trains_each_rules_rate_from_the_same_start_and_keeps_the_lowest_loss():
    found = _found("train.lr_find_rule=trial", "train.lr_find_trial_steps=4")
    curve = lr_curve.Curve()
    for lr, loss in zip((lr for lr, _ in found.curve), found.raw):
        curve.add(lr, loss)
    read = {lr_curve.RULES[rule](curve.readable(20)) for rule in lr_curve.TRIED}
    assert {lr for lr, _ in found.trial} == read and found.suggestion == min(found.trial, key=lambda t: t[1])[0]
    assert found.record()["trial"] == [[lr, loss] for lr, loss in found.trial]
    again = _found("train.lr_find_rule=trial", "train.lr_find_trial_steps=4")
    assert again.trial == found.trial  # the same weights and batches for every rate, and every time


def test_steps_per_decade_sets_the_ramps_length():
    found = _found("train.lr_find_steps_per_decade=6")  # 1e-4..1: 4 decades
    assert found.steps == 25 and len(found.curve) <= 25 and found.curve[1][0] == pytest.approx(1e-4 * 10 ** (4 / 24))


@pytest.mark.parametrize("bad, said", [
    ("optimizer.lr=fast", "optimizer.lr='fast' is not valid; give a number, or auto"),
    ("optimizer.lr_auto_factor=0", "optimizer.lr_auto_factor=0 must be a number > 0"),
    ("train.lr_find_rule=best", "train.lr_find_rule='best' is not valid; use one of valley, steepest, min_div10, "
                                "diverged_div10, trial"),
    ("train.lr_find_diverge_ratio=1", "train.lr_find_diverge_ratio=1.0 must be > 1"),
    ("train.lr_find_diverge_steps=11", "train.lr_find_diverge_steps=11 must be between 1 and half of "
                                       "train.lr_find_steps=20"),
    ("train.lr_find_steps_per_decade=0", "train.lr_find_steps_per_decade=0 must be >= 1"),
    ("train.lr_find_trial_steps=0", "train.lr_find_trial_steps=0 must be >= 1"),
    ("train.lr_find_max=1e-8", "train.lr_find_min=0.0001 and train.lr_find_max=1e-08: the range test's ramp needs"),
    ("train.lr_find_steps=5", "train.lr_find_steps=5 must be >= 10"),
])
def test_nonsense_is_refused_when_composed(bad, said):
    with pytest.raises(ConfigError, match="^" + said.replace("(", r"\(").replace(")", r"\)")):
        make_settings([*AUTO, bad])



@pytest.mark.parametrize("extra, says", [
    (["train.lr_find_steps=30"], r"differs from this run's: train.lr_find_steps=30 \(there 20\)"),
    (["train.batch_size=8"], r"train.batch_size=8 \(there 16\)"),
])
def test_a_range_test_made_with_other_settings_is_not_reused(tmp_path, extra, says):
    from fastpipe.record import results

    results.write_json_atomic(tmp_path / "metrics.json", {"status": "ok", "batch_size": 16, "lr_search": {
        "rule": "valley", "min": 1e-4, "max": 1.0, "steps": 20, "curve": [[1e-3, 1.0]], "suggestion": 1e-3}})
    with pytest.raises(ConfigError, match=says):
        lr_range.reused(make_settings([*AUTO, f"train.lr_find_from={tmp_path}", *extra]))
    with pytest.raises(ConfigError, match="no finished range test there \\(no metrics.json\\)"):
        lr_range.reused(make_settings([*AUTO, f"train.lr_find_from={tmp_path / 'nowhere'}"]))
    with pytest.raises(ConfigError, match="train.lr_find_only=true is about optimizer.lr=auto's range test"):
        lr_range.settle(make_settings([*TINY, "optimizer.lr=0.01", "train.lr_find_only=true"]), cpu_runtime())
