"""Races simulated through the race's own decisions (rounds.decide_round, rounds.finish), without
training: each round's times are drawn at random. It measures what a race's settings promise: how
often identical configurations name a winner, how often a configuration no worse than the best is
sent out, and how many seeds a real difference takes (docs/time-to-target.md#how-a-race-decides;
benchmarks/race_stats.py tables them)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, List, Sequence

import numpy as np

from fastpipe.sweeps.race.rounds import RaceRecord, RaceSettings, decide_round, finish

# (generator, round number) -> one time per configuration (inf: a miss)
Draw = Callable[[np.random.Generator, int], Sequence[float]]


@dataclass
class Outcome:
    """What simulated races did: shares of races (0..1), and the seeds the races ran."""

    races: int
    winner: float  # named a winner (any)
    winner_is: List[float]  # named configuration j the winner, per j
    sent_out_best: float  # sent out at least one of the ``best`` configurations
    seeds_median: float  # rounds a race ran (median)


def lognormal(medians: Sequence[float], sigma: float, miss: Sequence[float]) -> Draw:
    """Times around ``medians`` (log-normal, ``sigma`` on the log scale), each configuration j missing the
    target with chance ``miss[j]``: a draw for ``simulate``."""
    medians, miss = np.asarray(medians, dtype=float), np.asarray(miss, dtype=float)

    def draw(rng: np.random.Generator, _round: int) -> Sequence[float]:
        times = medians * np.exp(sigma * rng.standard_normal(len(medians)))
        return np.where(rng.random(len(medians)) < miss, math.inf, times).tolist()

    return draw


def simulate(draw: Draw, configurations: int, settings: RaceSettings, races: int, seed: int = 0,
             best: Sequence[int] = ()) -> Outcome:
    """``races`` races of ``configurations`` configurations whose times ``draw`` gives, decided round by
    round as fastpipe decides them (seeded: the same numbers every time). ``best``: the configurations no
    worse than the best, whose sending out is counted."""
    rng = np.random.default_rng(seed)
    winners = np.zeros(configurations)
    sent_best = named = 0
    seeds = []
    for _ in range(races):
        record = RaceRecord(settings={}, seed_base=0, combos=[[] for _ in range(configurations)], baseline=0,
                            entrants=list(range(configurations)))
        survivors = list(range(configurations))
        for round_no in range(settings.max_rounds):
            times = draw(rng, round_no)
            values = {str(n): (None if math.isinf(times[n]) else float(times[n])) for n in survivors}
            entry = {"round": round_no, "jobs": list(survivors), "values": values}
            record.rounds.append(entry)
            survivors = decide_round(record, entry, survivors, {}, settings)
            if len(survivors) <= 1:
                break
        finish(record, survivors, "max_rounds")
        seeds.append(len(record.rounds))
        if record.winner is not None:
            named += 1
            winners[record.winner] += 1
        sent_best += any(str(b) in record.eliminated for b in best)
    return Outcome(races, named / races, (winners / races).tolist(), sent_best / races, float(np.median(seeds)))
