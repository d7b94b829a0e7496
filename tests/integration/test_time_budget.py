"""train.time_budget_s on real in-process runs (issue 22): the budget stops a run where it is passed, the
run resumes on the clock it stopped with, and a spent budget trains nothing. (A module of its own beside
test_target.py: each module is one unit of work for the tier's two workers, and the tier ends on these.)"""
from __future__ import annotations

import pytest
from conftest import TINY, run_in_process

from fastpipe.errors import TrainingError

from unit.train.test_target import parts_add_up


def test_an_unreached_target_records_its_best_and_a_time_budget_stops_and_resumes(tmp_path):
    args = TINY + ["train.max_steps=200", "train.epochs=30", "train.eval_every=3", "train.target=1.0",
                   "optimizer.lr=0.0001"]  # far from 100 % in a few seconds
    first = run_in_process(tmp_path, args + ["train.time_budget_s=0.5"])
    t = first["target"]
    assert first["status"] == "ok" and first["stopped_by"] == "time_budget", first.get("reason")
    assert not t["reached"] and t["reached_value"] is None and t["seconds"] >= 0.5 and first["steps"] < 200
    assert t["best_value"] == max(c["value"] for c in t["curve"] if not c["subset"]) == first["best"]["value"]
    assert (tmp_path / "checkpoints" / f"step-{first['steps']:08d}.pt").is_file()  # to resume from
    parts_add_up(first["time_breakdown_s"])

    second = run_in_process(tmp_path, args + ["train.time_budget_s=1.0", "train.resume=auto"])
    t2 = second["target"]
    assert second["status"] == "ok" and second["stopped_by"] == "time_budget"
    assert any(f"at step {first['steps']} " in w for w in second["warnings"])
    assert second["per_rank"]["steps_run"] == [second["steps"] - first["steps"]]  # no step ran twice
    assert t2["curve"][:len(t["curve"])] == t["curve"]  # the curve goes on
    new = t2["curve"][len(t["curve"])]
    run = second["time_breakdown_s"]
    # The clock continued from the first launch's; this launch's start-up is not on it.
    assert t["seconds"] < new["seconds"] <= t["seconds"] + run["wall_s"] - run["setup"] + 0.05
    assert t2["seconds"] >= 1.0 and t2["seconds_end_to_end"] - t2["seconds"] == pytest.approx(
        t["seconds_end_to_end"] - t["seconds"])
    parts_add_up(run)


def test_the_time_budget_and_the_nonfinite_limit_hold_when_evaluations_cut_every_window_short(tmp_path):
    # eval_every=2 below measure.window=50: no window ever fills, yet the host is synced at each evaluation.
    short = TINY + ["measure.window=50", "train.eval_every=2", "train.epochs=30", "train.max_steps=400"]
    slow = ["model._target_=fault_models.Slow", "+model.sleep_s=0.025"]
    m = run_in_process(tmp_path / "budget", short + slow + ["train.time_budget_s=0.3"])
    assert m["status"] == "ok" and m["stopped_by"] == "time_budget" and m["steps"] < 40, (m["steps"], m.get("reason"))
    with pytest.raises(TrainingError, match=r"non-finite for [345] steps in a row"):
        run_in_process(tmp_path / "nan", short + ["model._target_=fault_models.NaNAfter", "+model.after=0",
                                                  "train.max_nonfinite_steps=3"])
    # One epoch shorter than a window (13 steps, window 50, no periodic evaluation): checked at its end (an
    # epoch sleeps 13 x 0.025 s, past the budget).
    m = run_in_process(tmp_path / "epochs", TINY + ["measure.window=50", "train.epochs=30", "train.max_steps=400"]
                       + slow + ["train.time_budget_s=0.3"])
    assert m["stopped_by"] == "time_budget" and m["steps"] <= 26, m["steps"]


def test_the_time_budget_holds_in_a_window_longer_than_the_run_and_a_spent_budget_trains_nothing(tmp_path, capfd):
    """One process reads its host clock each step: a budget passed mid-epoch stops there, not at the epoch's
    end (measure.window longer than the run: no window edge, no periodic evaluation). A run whose last step
    passes the budget finished: not stopped_by time_budget. A resume whose clock spent the budget trains
    nothing (not one more step each time) and keeps the record."""
    slow = ["model._target_=fault_models.Slow", "+model.sleep_s=0.025", "measure.window=500", "train.epochs=1"]
    m = run_in_process(tmp_path / "budget", TINY + slow + ["train.time_budget_s=0.15", "train.max_steps=400"])
    assert m["stopped_by"] == "time_budget" and m["steps"] <= 8, m["steps"]  # 6 steps pass 0.15 s; an epoch is 11
    again = run_in_process(tmp_path / "budget", TINY + slow + ["train.time_budget_s=0.15", "train.max_steps=400",
                                                               "train.resume=auto"])
    assert "shows train.time_budget_s=0.15 spent (" in capfd.readouterr().err
    assert again["steps"] == m["steps"] and again["stopped_by"] == "time_budget" and again["val_metrics"] == m["val_metrics"]
    done = run_in_process(tmp_path / "done", TINY + ["model._target_=fault_models.Slow", "+model.sleep_s=0.15",
                                                     "train.max_steps=1", "train.time_budget_s=0.1"])
    assert done["steps"] == 1 and done["stopped_by"] is None
