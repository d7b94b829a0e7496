"""What a race's settings promise, by simulation through the race's own decisions (fastpipe/sweeps/race/
simulate.py): (1) how often identical configurations name a winner or send one out, and how often the
best is sent out beside worse ones (goal: at most alpha = 0.05); (2) the power: how often, and after how
many seeds, the faster of two configurations 1.3x apart wins, at the spread of times to target measured
on the GPU (issue 54: ResNet-50 to 90 % on one H100, log-times spread about 0.26 for batch 256, 0.04 for 512;
one run in four to six missed the target within 3 epochs) and at narrower ones. Runs in about a minute on
one core; seeded, so the tables come out the same each time. From the repository root:
    python benchmarks/race_stats.py > benchmarks/results/race-stats/cpu-DATE-COMMIT/race_stats.md
"""
from __future__ import annotations

import argparse
import time

from fastpipe.sweeps.race import stats
from fastpipe.sweeps.race.rounds import RaceSettings
from fastpipe.sweeps.race.simulate import lognormal, simulate


def alpha_table(races: int) -> None:
    print("## Alpha: identical configurations (log-normal times, sigma 0.25)\n")
    print(f"{races} races per row, alpha 0.05, every default but max_rounds (the fewest that can send one out "
          "where 10 cannot).\n")
    print("| configurations | max_rounds | first test (seed) | miss rate | named a winner | sent one out |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k in (2, 3, 4, 6, 8):
        settings = RaceSettings()
        settings = RaceSettings(max_rounds=settings.enough_rounds(k))
        for miss in (0.0, 0.2):
            out = simulate(lognormal([10.0] * k, 0.25, [miss] * k), k, settings, races, seed=k, best=range(k))
            print(f"| {k} | {settings.max_rounds} | {settings.first_look(k)} | {miss:.0%} | {out.winner:.2%} | "
                  f"{out.sent_out_best:.2%} |")
    out = simulate(lognormal([10.0, 10.0, 15.0, 15.0], 0.25, [0.1, 0.1, 0.4, 0.4]), 4, RaceSettings(), races, seed=9,
                   best=[0, 1])
    print(f"\nTwo best configurations beside two 1.5x slower ones that miss more often (10 % and 40 %): one of the "
          f"best sent out in {out.sent_out_best:.2%} of {races} races.\n")


def power_table(races: int) -> None:
    print("## Power: two configurations 1.3x apart (medians 10 and 13 s)\n")
    print(f"{races} races per row; wins = the faster named the winner; seeds = the median rounds a race ran "
          "(its max_rounds when it ended in a tie).\n")
    print("| log-time sigma | miss rate | max_rounds | wins | slower wins | seeds (median) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for sigma, miss in ((0.04, 0.0), (0.15, 0.0), (0.26, 0.0), (0.26, 0.25)):
        for rounds in (10, 20, 40):
            out = simulate(lognormal([10.0, 13.0], sigma, [miss, miss]), 2, RaceSettings(max_rounds=rounds), races,
                           seed=rounds, best=[0])
            print(f"| {sigma:g} | {miss:.0%} | {rounds} | {out.winner_is[0]:.1%} | {out.winner_is[1]:.1%} | "
                  f"{out.seeds_median:g} |")
    print()


def levels() -> None:
    print("## The per-look level (two-sided sign test), alpha 0.05\n")
    print("| configurations | pairs | max_rounds | level | chance a fair walk crosses it | fewest seeds |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k in (2, 3, 4, 6, 8):
        for rounds in (10, 20):
            pairs = stats.pairs_of(k)
            level = stats.level(0.05, pairs, rounds)
            print(f"| {k} | {pairs} | {rounds} | {level:.3g} | {stats.crossing(level, rounds):.4f} (at most "
                  f"{0.05 / pairs:.4f}) | {stats.fewest_seeds(0.05, pairs, rounds) or 'none'} |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--races", type=int, default=4000, help="races per alpha row (power rows: a quarter)")
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"# Race statistics by simulation ({stats.METHOD})\n")
    levels()
    alpha_table(args.races)
    power_table(max(args.races // 4, 100))
    print(f"(simulated in {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
