"""optimizer.lr=auto's numbers (issue 32): the ramp, the smoothed curve and its stop, and each rule on
given curves."""
from __future__ import annotations

import math

import pytest

from fastpipe.finders.lr_curve import Curve, min_div10, ramp, readable, steepest, suggest, valley

LRS = ramp(1e-7, 10.0, 100)


def _shaped(x: float) -> float:
    """A range test's typical loss against log10(lr): flat to 1e-4, a smooth descent to its bottom at 1e-1
    (steepest half-way, at 10^-2.5), then a climb."""
    if x < -4:
        return 2.0
    if x <= -1:
        return 1.25 + 0.75 * math.cos(math.pi * (x + 4) / 3)
    return 0.5 + 5 * (x + 1) ** 2


LOSSES = [_shaped(math.log10(lr)) for lr in LRS]


def _decades(lr: float, expected: float) -> float:
    return abs(math.log10(lr) - expected)


def test_the_ramp_rises_exponentially_from_min_to_max():
    assert LRS[0] == pytest.approx(1e-7) and LRS[-1] == pytest.approx(10.0) and len(LRS) == 100
    ratios = {round(b / a, 9) for a, b in zip(LRS, LRS[1:])}
    assert len(ratios) == 1  # equal steps of log(lr)


def test_each_rule_on_a_typical_curve():
    assert _decades(valley(LRS, LOSSES), -2.5) < 0.15  # half-way down the descent
    assert _decades(steepest(LRS, LOSSES), -2.5) < 0.1  # where it falls fastest
    assert _decades(min_div10(LRS, LOSSES), -2.0) < 0.1  # a tenth of the bottom's rate (1e-1)


def test_a_single_noisy_dip_misleads_steepest_but_not_valley():
    noisy = list(LOSSES)
    noisy[20] = 1.5  # one batch that happened to be easy, on the plateau at ~4e-6
    assert _decades(steepest(LRS, noisy), math.log10(LRS[19])) < 1e-9
    assert _decades(valley(LRS, noisy), -2.5) < 0.15


def test_the_rules_read_the_curve_without_its_first_tenth_and_last_five_points():
    lrs, losses = readable(LRS, LOSSES, 100)
    assert lrs == LRS[10:95] and losses == LOSSES[10:95]
    short = readable(LRS[:12], LOSSES[:12], 100)  # diverged early: all but the point that diverged
    assert short == (LRS[:11], LOSSES[:11])
    assert readable(LRS[:2], LOSSES[:2], 100) is None


def test_suggest_applies_the_named_rule_to_the_readable_part():
    curve = Curve(lrs=list(LRS), losses=list(LOSSES))
    assert suggest("min_div10", curve, 100) == min_div10(LRS[10:95], LOSSES[10:95])
    assert suggest("valley", Curve(lrs=LRS[:2], losses=LOSSES[:2]), 100) is None


def test_the_smoothed_loss_is_bias_corrected_and_stops_at_four_times_its_best():
    curve = Curve()
    assert not curve.add(1e-7, 2.0) and curve.losses == [2.0]  # the first point is the loss itself, not 0.02 x it
    for lr in LRS[1:10]:
        assert not curve.add(lr, 1.0)
    expected = 0.0
    for loss in [2.0] + [1.0] * 9:
        expected = 0.98 * expected + 0.02 * loss
    assert curve.losses[-1] == pytest.approx(expected / (1 - 0.98 ** 10))
    assert curve.best == curve.losses[-1] and curve.diverged_at is None
    assert curve.add(LRS[10], 60.0)  # smoothed: past 4x the best
    assert curve.losses[-1] > 4 * curve.best and curve.diverged_at == LRS[10]


def test_a_non_finite_loss_stops_the_test_without_a_point():
    curve = Curve()
    curve.add(1e-7, 1.0)
    assert curve.add(2e-7, float("nan")) and curve.diverged_at == 2e-7 and len(curve.losses) == 1
    negative = Curve()  # a loss that may be negative never stops on the 4x rule
    assert not any(negative.add(lr, -1.0 + 0.5 * i) for i, lr in enumerate(LRS[:10]))
