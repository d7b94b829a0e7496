"""The lr_schedule group: warm-up and decay, torch schedulers stepped over the run and resumed."""
from __future__ import annotations

import math

import pytest
import torch

from fastpipe.record.run_warnings import collect_warnings
from fastpipe.stages.optim import build_optimizer
from fastpipe.stages.schedules import build_schedule

from ..conftest import composed


# ------------------------------------------------------------------ schedules and parameter groups
def schedule_of(overrides, total=20):
    settings = composed(overrides)
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


def test_graph_states_the_configured_peak_and_betas_not_the_schedulers_state_at_step_0():
    """OneCycleLR starts at max_lr / div_factor and sets beta1 to its max_momentum: graph.txt's optimizer line
    states the run's peak lr and the configured betas, its schedule line the shape and the cycled beta1."""
    from fastpipe.stages.optim import describe_optimizer

    onecycle, opt = schedule_of(["lr_schedule=onecycle", "lr_schedule.max_lr=0.01", "lr_schedule.pct_start=0.2",
                                 "optimizer.lr=0.003"], total=10)
    line = describe_optimizer(opt, onecycle.configured)
    assert "lr=0.01 (peak)  betas=(0.9, 0.95)" in line and "0.0004" not in line
    assert onecycle.describe().endswith("over 10 steps: lr 0.0004 at step 0 -> 0.01 (peak) at step 1 -> 4e-08 at "
                                        "the end (cos); beta1 0.95 -> 0.85 at the peak -> 0.95 (cycle_momentum: in "
                                        "place of the optimizer's 0.9)")
    cosine, opt = schedule_of(["optimizer.lr=0.1", "lr_schedule.warmup_steps=4"])
    assert "lr=0.1 (peak)" in describe_optimizer(opt, cosine.configured)
    assert "over 20 steps: lr 0.025 at step 0 -> 0.1 (peak) at step 3 -> 0.0009607 at the end" in cosine.describe()
