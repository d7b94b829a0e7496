"""Racing configurations over seeds (``hydra/sweeper=race``): the plan, each round's outcome, ``race.json``.

Round k (k = 0, 1, ...) trains every surviving configuration once with ``seed + k``: the same seed
for every job of a round, so the seeds are the blocks of a paired design. From round ``min_rounds``
on, after each round, the survivors' times to target are tested (stats.py): the survivors
significantly worse than the leader leave, worst first, the rest tested again without them
(``step_down``). A round's cap is fixed as it starts, the same
for every job in it: ``cap`` x the leader's median training-clock time to target over the finished
rounds; a run whose training clock passes it stops (``train.time_budget_s``) and counts as a miss
for its seed. The race stops when one configuration is left (the winner), after ``max_rounds``, or
once ``max_wall_s`` of rounds have passed; the survivors then form a tie set, ranked by median time.

Folders: round K of configuration N trains in ``<folder>N/round-K/``; ``<folder>N/metrics.json``
combines its rounds as ``report.repeats`` combines repeats (fastpipe/launch/repeats.py), so a
report reads a race like any sweep. ``race.json`` in the sweep folder is rewritten after every round.
"""
from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from fastpipe.errors import ConfigError
from fastpipe.record.results import write_json_atomic
from fastpipe.sweeps.race.stats import p_text, ranking, step_down

FILE = "race.json"
VERSION = 2  # 2: rounds' retests (the step-down's further tests)
ROUND_PREFIX = "round-"


def round_folder(num: int, round_no: int, folder: str = "") -> str:
    """Configuration ``num``'s folder for round ``round_no`` (0-based), inside the sweep folder."""
    return f"{folder}{num}/{ROUND_PREFIX}{round_no}"


@dataclass
class RaceSettings:
    """``hydra.sweeper.*`` of the race (docs/sweeps.md)."""

    min_rounds: int = 5  # seeds before the first test (an exact paired test needs five to reach p < 0.05)
    max_rounds: int = 10  # seeds at most; the survivors then form a tie set
    alpha: float = 0.05  # the tests' significance level (after Holm's correction)
    cap: Optional[float] = 2.0  # a round's cap = cap x the leader's median time; null = no cap
    max_wall_s: Optional[float] = None  # stop after this many seconds of rounds; null = no limit

    def __post_init__(self) -> None:
        if self.min_rounds < 2:
            raise ConfigError(f"hydra.sweeper.min_rounds={self.min_rounds} must be >= 2 (seeds before the first "
                              "test; 5, the default, is the fewest an exact paired test can separate at 0.05)")
        if self.max_rounds < self.min_rounds:
            raise ConfigError(f"hydra.sweeper.max_rounds={self.max_rounds} must be >= hydra.sweeper.min_rounds="
                              f"{self.min_rounds}")
        if not 0.0 < self.alpha < 0.5:
            raise ConfigError(f"hydra.sweeper.alpha={self.alpha} must be between 0 and 0.5 (e.g. 0.05)")
        if self.cap is not None and not self.cap > 1.0:
            raise ConfigError(f"hydra.sweeper.cap={self.cap} must be > 1 (a multiple of the leader's median time "
                              "to target), or null for no cap")
        if self.max_wall_s is not None and not self.max_wall_s > 0:
            raise ConfigError(f"hydra.sweeper.max_wall_s={self.max_wall_s} must be > 0 seconds, or null")


def check_grid(configs: list) -> None:
    """One line (ConfigError) for a grid a race cannot run, given each combination's composed config: not
    ranked by time to target, seeds in the grid, repeats, fewer than two configurations."""
    if any(str(c.report.objective) != "time_to_target" for c in configs):
        raise ConfigError("hydra/sweeper=race races by time to target: add report.objective=time_to_target (with "
                          "train.target); a throughput does not depend on the seed: measure its spread with "
                          "report.repeats=K and the basic sweeper")
    if len({int(c.seed) for c in configs}) > 1:
        raise ConfigError("hydra/sweeper=race gives every job of round k the seed seed+k itself: drop seed from the "
                          "sweep's lists (seed=N, one value, sets the first round's seed)")
    if any(int(c.report.repeats) != 1 for c in configs):
        raise ConfigError("report.repeats inside hydra/sweeper=race: the race decides how many seeds each job gets "
                          "(hydra.sweeper.min_rounds / max_rounds); drop report.repeats")
    if len(configs) < 2:
        raise ConfigError(f"hydra/sweeper=race needs at least two configurations to race, the grid has "
                          f"{len(configs)}; give a list (e.g. compile=off,default) or run it once without -m")


def run_time(metrics: Optional[dict], clock: str = "training") -> Optional[float]:
    """A round's time to target on ``clock``: None when it missed (or was capped, or did not finish ok)."""
    target = (metrics or {}).get("target") or {}
    if (metrics or {}).get("status") != "ok" or not target.get("reached"):
        return None
    return target.get("seconds_end_to_end" if clock == "end_to_end" else "seconds")


def median_time(values: List[Optional[float]]) -> Optional[float]:
    """The median with a miss (None) counting as slower than every reached run; None if the median is a miss."""
    if not values:
        return None
    centre = statistics.median(math.inf if v is None else v for v in values)
    return None if math.isinf(centre) else centre


@dataclass
class RaceRecord:
    """The content of ``race.json`` (docs/sweeps.md lists its keys)."""

    settings: Dict[str, object]
    seed_base: int
    combos: List[List[str]]  # configuration N's overrides, in the grid's order
    baseline: Optional[int]
    entrants: List[int] = field(default_factory=list)  # the grid numbers raced (halving: its finalists)
    folder: str = ""  # where the configurations' folders are, inside the sweep folder ("race/" for halving)
    rounds: List[dict] = field(default_factory=list)
    winner: Optional[int] = None
    tie: Optional[List[int]] = None
    survivors: List[int] = field(default_factory=list)
    eliminated: Dict[str, dict] = field(default_factory=dict)  # "N": {round, p, reason}
    stopped_by: Optional[str] = None  # winner | max_rounds | max_wall_s | all_failed; null: still racing
    started: float = field(default_factory=time.time)
    ended: Optional[float] = None
    parallel: int = 1
    version: int = VERSION

    KEYS = ("version", "settings", "seed_base", "combos", "baseline", "entrants", "folder", "rounds", "winner", "tie",
            "survivors", "eliminated", "stopped_by", "started", "ended", "parallel")

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.KEYS}

    @classmethod
    def from_json(cls, data: dict) -> "RaceRecord":
        return cls(**{k: data[k] for k in cls.KEYS if k in data})

    def write(self, sweep_dir: Path) -> None:
        write_json_atomic(Path(sweep_dir) / FILE, self.to_json())

    def times(self, num: int) -> List[Optional[float]]:
        """Configuration ``num``'s time per round it ran (None = a miss)."""
        return [r["values"][str(num)] for r in self.rounds if str(num) in r["values"]]

    def wall_s(self) -> float:
        """Seconds the finished rounds took (a pause between a stop and its resume is not counted)."""
        return sum(r["ended"] - r["started"] for r in self.rounds if r.get("ended"))


def read(sweep_dir: Path) -> Optional[RaceRecord]:
    """The sweep folder's race record, or None (another kind of sweep)."""
    try:
        return RaceRecord.from_json(json.loads((Path(sweep_dir) / FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def round_cap(record: RaceRecord, survivors: List[int], cap: Optional[float]) -> Optional[float]:
    """The next round's cap in training-clock seconds: ``cap`` x the leader's median training time over
    the finished rounds; None without a cap or while the leader has no reached median."""
    if cap is None or not record.rounds:
        return None
    training = {n: [r["training_s"].get(str(n)) for r in record.rounds if str(n) in r["values"]] for n in survivors}
    medians = {n: median_time(v) for n, v in training.items()}
    reached = {n: m for n, m in medians.items() if m is not None}
    if not reached:
        return None
    leader = leader_of(record, survivors)
    return cap * reached[leader] if leader in reached else None


def leader_of(record: RaceRecord, survivors: List[int]) -> int:
    """The survivor with the best median within-seed rank over the rounds all survivors ran."""
    full = [r for r in record.rounds if all(str(n) in r["values"] for n in survivors)]
    if not full or len(survivors) < 2:
        return min(survivors)
    return ranking({n: [_inf(r["values"][str(n)]) for r in full] for n in survivors})[0]


def _inf(value: Optional[float]) -> float:
    return math.inf if value is None else float(value)


def decide_round(record: RaceRecord, entry: dict, survivors: List[int], failed: Dict[int, str],
                 settings: RaceSettings) -> List[int]:
    """After a round: drop the failed, test the survivors from ``min_rounds`` on (``step_down``), fill
    ``entry`` and the record's ``eliminated``; returns the survivors for the next round."""
    for n, reason in failed.items():
        record.eliminated[str(n)] = {"round": entry["round"], "p": None, "reason": f"failed: {reason}"}
    alive = [n for n in survivors if n not in failed]
    entry.update(failed=sorted(failed), friedman=None, posthoc={}, test=None, eliminated=[], retests=[])
    if not alive:
        return alive
    rounds = [r for r in record.rounds if all(str(n) in r["values"] for n in alive)]
    times = {n: [_inf(r["values"][str(n)]) for r in rounds] for n in alive}
    entry["leader"] = ranking(times)[0]
    if len(rounds) < settings.min_rounds or len(alive) < 2:
        return alive
    for i, (verdict, out) in enumerate(step_down(times, settings.alpha)):
        tested = {"test": verdict.test, "friedman": verdict.friedman, "eliminated": out,
                  "posthoc": {str(n): v for n, v in verdict.posthoc.items()}}
        if i == 0:
            entry.update(tested)
        else:
            entry["retests"].append(dict(tested, jobs=sorted(times)))
        for n in out:
            p = verdict.posthoc[n]["p_holm"]
            record.eliminated[str(n)] = {"round": entry["round"], "p": p,
                                         "reason": f"slower than job {verdict.leader} after {len(rounds)} seeds "
                                                   f"({verdict.test}, {p_text(p)} < alpha {settings.alpha:g})"}
        times = {n: v for n, v in times.items() if n not in out}
    entry["eliminated"] = sorted(n for n in alive if n not in times)
    return [n for n in alive if n in times]


def finish(record: RaceRecord, survivors: List[int], stopped_by: str) -> None:
    """The race's end: one survivor is the winner, more form a tie set ranked by median time."""
    order = sorted(survivors, key=lambda n: (_inf(median_time(record.times(n))), n))
    record.survivors = order
    record.winner = order[0] if len(order) == 1 else None
    record.tie = order if len(order) > 1 else None
    record.stopped_by = stopped_by if order else "all_failed"
    record.ended = time.time()
