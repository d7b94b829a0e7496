"""A target's screen ends once its outcome is settled as a miss (train/target.py OutOfReach): certainly
(the outcome is the whole subset's), or with train.target_screen_risk beyond that risk (a subset that
reaches the target is missed at most that often); the value on the curve is the evaluated samples', on
the missing side."""
from __future__ import annotations

import contextlib
import math
import random
from types import SimpleNamespace

import pytest
import torch
from conftest import TINY, run_in_process

from fastpipe.data.held_out_batches import KeptBatches
from fastpipe.measure.clock import RunClock
from fastpipe.stages.tasks import Classification
from fastpipe.train.held_out import evaluate, HeldOut
from fastpipe.train.target import OutOfReach, Target


class Correct(torch.nn.Module):
    """Logits that make sample i right exactly when its input says so (its label is always 0)."""

    def forward(self, right: torch.Tensor) -> torch.Tensor:
        return torch.stack([right.float(), 1 - right.float()], dim=1)


def held_out(rights, batch: int) -> HeldOut:
    batches = [(rights[i:i + batch], torch.zeros(len(rights[i:i + batch]), dtype=torch.long))
               for i in range(0, len(rights), batch)]
    kept = KeptBatches(batches)
    list(kept)  # the first whole pass: kept, its samples known
    return HeldOut(kept, Classification(), SimpleNamespace(autocast=contextlib.nullcontext), torch.device("cpu"))


def test_a_screen_ends_where_the_target_is_out_of_reach_and_its_outcome_is_the_whole_subsets():
    """Over random subsets, batches and targets: the screen's hit or miss equals the whole subset's,
    a screen ended early never reads as a hit, and it ends at the first batch that settles it."""
    rng = random.Random(0)
    ended = 0
    for _ in range(300):
        n, batch = rng.randint(1, 60), rng.randint(1, 9)
        accuracy = rng.random()
        rights = torch.tensor([rng.random() < accuracy for _ in range(n)])
        target = Target(rng.choice([rng.random(), round(rng.random(), 1)]), "accuracy", True, RunClock(), 1)
        held = held_out(rights, batch)
        until = OutOfReach(target, Classification.bounds, held.loader.samples)
        screened = evaluate(held, Correct(), until=until)["accuracy"]
        whole = rights.float().mean().item()
        assert target.hit(screened) == target.hit(whole), (n, batch, target.value, screened, whole)
        if until.stopped_at is None:
            assert screened == pytest.approx(whole)
            continue
        ended += 1
        seen = until.stopped_at
        assert seen < n and seen % batch == 0 and not target.hit(screened)
        assert screened == pytest.approx(rights[:seen].float().mean().item())
        # one batch fewer would not have settled it
        before = rights[:seen - batch]
        best = (before.sum().item() + (n - len(before))) / n
        assert target.hit(best)
    assert ended > 50  # the property was tested on screens that ended early, not only on whole ones


def screen(rights, batch: int, target: Target) -> OutOfReach:
    """``rights`` screened in their order at ``batch``: the OutOfReach that watched it."""
    held = held_out(rights, batch)
    until = OutOfReach(target, Classification.bounds, held.loader.samples)
    evaluate(held, Correct(), until=until)
    return until


def early_end_chance(ones: int, samples: int, batch: int, target: Target) -> float:
    """The exact chance, over the random orders of a subset of 0/1 samples (``ones`` right), that a screen
    ends early, summed over its checks (hypergeometric: the first n samples hold k right ones)."""
    chance = 0.0
    for n in range(batch, samples, batch):
        for k in range(n + 1):  # fewer right ones end it sooner: from none up to the first that does not end it
            until = OutOfReach(target, Classification.bounds, samples)
            until({"accuracy": float(batch)}, batch)  # a first batch all right: it counts the checks
            if not until({"accuracy": float(k)}, n):
                break
            chance += math.comb(ones, k) * math.comb(samples - ones, n - k) / math.comb(samples, n)
    return chance


def test_a_subset_at_the_target_ends_early_less_often_than_the_risk():
    """0/1 samples (the largest variance a subset at the target can have), a subset just reaching 0.9: the
    exact chance that its screen ends early stays under the risk, and is not nothing (the rule fires)."""
    for samples, batch, risk in ((2048, 256, 0.001), (512, 32, 0.2)):
        ones = math.ceil(0.9 * samples)
        chance = early_end_chance(ones, samples, batch, Target(0.9, "accuracy", True, RunClock(), 1, screen_risk=risk))
        assert 0 < chance <= risk, (samples, risk, chance)
    assert early_end_chance(461, 512, 32, Target(0.9, "accuracy", True, RunClock(), 1)) == 0  # no risk: exact


def test_a_subset_well_short_of_the_target_ends_sooner_than_certainty_allows():
    """2,048 samples at batch 256 against 0.9 (at most 204 misses): at 78 % right the risk (0.001) ends
    the screen after its first batch, where certainty needs 1,024 samples; at 83 %, after 512 against
    1,280. Each batch is as right as the whole, so the ends do not hang on a draw."""
    for right, risky, certain in ((0.78, 256, 1024), (0.83, 512, 1280)):
        misses = round(2048 * (1 - right)) // 8
        rights = torch.tensor(([True] * (256 - misses) + [False] * misses) * 8)
        ends = {risk: screen(rights, 256, Target(0.9, "accuracy", True, RunClock(), 1, screen_risk=risk)).stopped_at
                for risk in (0.001, 0.0)}
        assert ends == {0.001: risky, 0.0: certain}, (right, ends)


@pytest.mark.parametrize("higher, value, variance", [(True, 0.9, 0.09), (False, 0.3, 0.21), (True, 0.3, 0.25)])
def test_the_risk_is_shared_over_the_checks_at_the_largest_variance_in_reach(higher, value, variance):
    """At 512 of 2,048 samples (batch 256: 7 checks), a shortfall whose Bernstein bound is twice risk / 7
    does not end the screen and one at half of it does: the risk is shared over the checks, at the largest
    variance a subset reaching the target can have ((1 - mean) mean at the reachable mean nearest 0.5)."""
    risk, n, checks = 0.01, 512, 7
    for factor, ends in ((2.0, False), (0.5, True)):
        e = math.log(checks / (risk * factor))  # solve n s^2 = e (2 variance + 2 s / 3) for the shortfall s
        short = (2 * e / 3 + math.sqrt((2 * e / 3) ** 2 + 8 * n * variance * e)) / (2 * n)
        until = OutOfReach(Target(value, "m", higher, RunClock(), 1, screen_risk=risk), (0.0, 1.0), 2048)
        assert not until({"m": 256.0 if higher else 0.0}, 256)  # a first batch at its best
        assert until({"m": n * (value - short if higher else value + short)}, n) is ends, (factor, short)


def test_the_risk_needs_both_bounds_and_is_recorded():
    """A loss bounded below only ends a screen certainly, never by the risk; a lower-is-better metric with
    both bounds ends by it on its upper side; metrics.json's target keeps the risk (null without a subset)."""
    loss = Target(0.5, "loss", False, RunClock(), 1, subset=10, screen_risk=0.5)
    half = OutOfReach(loss, (0.0, None), samples=1000)
    assert not half({"loss": torch.tensor(150.0)}, 100) and half.variance is None  # mean 1.5: certainty needs more
    error = Target(0.1, "error", False, RunClock(), 1, subset=10, screen_risk=0.001)
    both = OutOfReach(error, (0.0, 1.0), samples=2048)
    assert not both({"error": torch.tensor(25.0)}, 256)  # a mean of 0.098: on the target's side
    assert both({"error": torch.tensor(60.0)}, 256) and both.stopped_at == 256  # 0.23: far beyond it
    assert loss.record(0, 0)["screen_risk"] == 0.5
    assert Target(0.5, "loss", False, RunClock(), 1, screen_risk=0.5).record(0, 0)["screen_risk"] is None


def test_a_lower_is_better_metric_ends_on_its_lower_bound_and_an_unbounded_side_never_ends():
    loss = Target(0.5, "loss", False, RunClock(), 1)
    until = OutOfReach(loss, (0.0, None), samples=10)
    assert not until({"loss": torch.tensor(4.9)}, 6)  # the 4 left at 0 would make it 0.49
    assert until({"loss": torch.tensor(5.1)}, 6) and until.stopped_at == 6  # at best 0.51
    unbounded = OutOfReach(Target(0.5, "loss", True, RunClock(), 1), (0.0, None), samples=10)
    assert not unbounded({"loss": torch.tensor(0.0)}, 9)  # higher is better with no upper bound
    accuracy = OutOfReach(Target(0.9, "accuracy", True, RunClock(), 1), (0.0, 1.0), samples=10)
    assert not accuracy({"loss": torch.tensor(0.0)}, 5)  # the primary metric is not among the sums
    assert not accuracy({"accuracy": torch.tensor(0.0)}, 10)  # nothing left to skip


def test_a_first_screen_is_read_whole_to_be_kept_then_screens_end_early(tmp_path):
    """A run's screens: the first one reads its subset whole (its batches are kept), a later one that
    cannot reach the target ends early and says where; the run still stops at a confirmed hit or its
    last step."""
    m = run_in_process(tmp_path, TINY + ["train.max_steps=6", "train.eval_every=1", "train.target=0.99",
                                         "train.target_eval_samples=32", "train.eval_batch_size=4",
                                         "train.eval_read_ahead=false"])
    screens = [c for c in m["target"]["curve"] if c["subset"]]
    assert m["status"] == "ok" and len(screens) >= 5, m.get("reason")
    assert "evaluated" not in screens[0]
    ended = [c for c in screens if "evaluated" in c]
    assert ended and all(c["evaluated"] % 4 == 0 and 4 <= c["evaluated"] < 32 and c["value"] < 0.99 for c in ended)
