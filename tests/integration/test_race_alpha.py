"""A race's stated alpha, proven by simulation through its own decisions (fastpipe/sweeps/race/simulate.py):
identical configurations name a winner, and a configuration no worse than the best is sent out, in at
most alpha of the races, over every look and 2 to 8 configurations (issue 54)."""
from __future__ import annotations

import math

import pytest

from fastpipe.sweeps.race import stats
from fastpipe.sweeps.race.rounds import RaceSettings
from fastpipe.sweeps.race.simulate import lognormal, simulate

ALPHA = 0.05


def within_alpha(share: float, races: int) -> bool:
    """``share`` of ``races`` is at most ALPHA, allowing the simulation's own noise (2.6 standard errors: a
    method that spends 6 % or more fails; the one before this issue spent 6-12 %)."""
    return share <= ALPHA + 2.6 * math.sqrt(ALPHA * (1 - ALPHA) / races)


@pytest.mark.parametrize("configurations, max_rounds, races", [(2, 10, 4000), (3, 10, 2000), (5, 10, 1000),
                                                                (8, 15, 600)])
def test_identical_configurations_name_a_winner_and_send_one_out_in_at_most_alpha_of_races(
        configurations, max_rounds, races):
    settings = RaceSettings(max_rounds=max_rounds, alpha=ALPHA)
    draw = lognormal([10.0] * configurations, sigma=0.25, miss=[0.2] * configurations)
    outcome = simulate(draw, configurations, settings, races, seed=configurations, best=range(configurations))
    assert within_alpha(outcome.sent_out_best, races) and outcome.winner <= outcome.sent_out_best


def test_the_simulated_rate_of_two_identical_configurations_is_the_exact_crossing_chance():
    # no misses, every seed untied: a race of two is one sign walk, whose crossing chance is computed exactly
    settings = RaceSettings(alpha=ALPHA)
    outcome = simulate(lognormal([10.0, 10.0], 0.25, [0.0, 0.0]), 2, settings, 4000, seed=1, best=[0, 1])
    level = stats.level(ALPHA, 1, 10)
    exact = stats.crossing(level, 10)  # every look from the first; the tests begin at the 6th seed: the same
    assert exact <= ALPHA and outcome.winner == pytest.approx(exact, abs=2.6 * math.sqrt(exact / 4000))


def test_the_best_is_rarely_sent_out_beside_worse_configurations():
    # two best configurations tied, two 1.5x slower that miss more often: only the best two count as errors
    draw = lognormal([10.0, 10.0, 15.0, 15.0], sigma=0.25, miss=[0.1, 0.1, 0.4, 0.4])
    outcome = simulate(draw, 4, RaceSettings(alpha=ALPHA), 2000, seed=3, best=[0, 1])
    assert within_alpha(outcome.sent_out_best, 2000)
    assert outcome.winner_is[2] == outcome.winner_is[3] == 0.0
