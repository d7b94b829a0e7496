"""Racing configurations over seeds (``hydra/sweeper=race``): the plan, each round's outcome, ``race.json``.

Round k (k = 0, 1, ...) trains every surviving configuration once with ``seed + k``: the same seed
for every job of a round, so the seeds pair the runs. From the ``min_rounds``-th seed on (by default
the fewest seeds that can send a configuration out), after each round, every pair of survivors is
tested (stats.py): a survivor another beat beyond the race's per-look level leaves. A round's cap is
fixed as it starts, the same for every job in it: ``cap`` x the leader's median training-clock time
to target, once the leader has reached the target in ``cap_after`` rounds; a run whose training
clock passes it stops (``train.time_budget_s``) and counts as a miss for its seed. A round in which
every job missed tells nothing (every pair ties in it). The race stops when one configuration is
left (the winner when every other was sent out by a test; the last standing when one failed), after
``max_rounds``, or once ``max_wall_s`` of rounds have passed; the survivors then form a tie set.

Folders: round K of configuration N trains in ``<folder>N/round-K/``; ``<folder>N/metrics.json``
combines its rounds as ``report.repeats`` combines repeats (fastpipe/launch/repeats.py), so a
report reads a race like any sweep. ``race.json`` in the sweep folder is rewritten after every round.
"""
from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Dict, List, Optional

from fastpipe.errors import ConfigError
from fastpipe.record.results import write_json_atomic
from fastpipe.sweeps.race import stats
from fastpipe.sweeps.race.stats import p_text, ranking

FILE = "race.json"
SCHEMA_VERSION = 3  # 3: pairwise sign tests (was Friedman/Conover and Wilcoxon), last standing, schema_version
OLDER = (1, 2)  # races an earlier fastpipe decided ("version"): reported as they were decided, never resumed
ROUND_PREFIX = "round-"


def round_folder(num: int, round_no: int, folder: str = "") -> str:
    """Configuration ``num``'s folder for round ``round_no`` (0-based), inside the sweep folder."""
    return f"{folder}{num}/{ROUND_PREFIX}{round_no}"


@dataclass
class RaceSettings:
    """``hydra.sweeper.*`` of the race (docs/sweeps.md)."""

    min_rounds: Optional[int] = None  # seeds before the first test; null: the fewest that can send one out
    max_rounds: int = 10  # seeds at most; the survivors then form a tie set
    alpha: float = 0.05  # the chance, over the whole race, of sending out a configuration no worse than the best
    cap: Optional[float] = 2.0  # a round's cap = cap x the leader's median time; null = no cap
    cap_after: int = 3  # the leader's runs that reached the target before a round is capped
    max_wall_s: Optional[float] = None  # stop after this many seconds of rounds; null = no limit

    def __post_init__(self) -> None:
        if self.min_rounds is not None and self.min_rounds < 2:
            raise ConfigError(f"hydra.sweeper.min_rounds={self.min_rounds} must be >= 2 (seeds before the first "
                              "test), or null: the fewest seeds that can send a configuration out")
        if self.min_rounds is not None and self.max_rounds < self.min_rounds:
            raise ConfigError(f"hydra.sweeper.max_rounds={self.max_rounds} must be >= hydra.sweeper.min_rounds="
                              f"{self.min_rounds}")
        if not 0.0 < self.alpha < 0.5:
            raise ConfigError(f"hydra.sweeper.alpha={self.alpha} must be between 0 and 0.5 (e.g. 0.05)")
        if self.cap is not None and not self.cap > 1.0:
            raise ConfigError(f"hydra.sweeper.cap={self.cap} must be > 1 (a multiple of the leader's median time "
                              "to target), or null for no cap")
        if self.cap_after < 1:
            raise ConfigError(f"hydra.sweeper.cap_after={self.cap_after} must be >= 1 (the leader's runs that reached "
                              "the target before a round is capped; 3, the default, estimates its time)")
        if self.max_wall_s is not None and not self.max_wall_s > 0:
            raise ConfigError(f"hydra.sweeper.max_wall_s={self.max_wall_s} must be > 0 seconds, or null")

    def first_look(self, entrants: int) -> int:
        """The round count after which the tests begin: ``min_rounds``, or the fewest seeds that can send one
        of ``entrants`` configurations out (``check``: there is one)."""
        if self.min_rounds is not None:
            return self.min_rounds
        return stats.fewest_seeds(self.alpha, stats.pairs_of(entrants), self.max_rounds) or self.max_rounds

    def enough_rounds(self, entrants: int) -> int:
        """The fewest ``max_rounds`` (this one or more) at which a race of ``entrants`` can send one out."""
        pairs = stats.pairs_of(entrants)
        return next(n for n in range(self.max_rounds, 10_000) if stats.fewest_seeds(self.alpha, pairs, n))

    def check(self, entrants: int) -> None:
        """One line (ConfigError) when a race of ``entrants`` configurations could never send one out."""
        pairs, enough = stats.pairs_of(entrants), self.enough_rounds(entrants)
        if enough == self.max_rounds:
            return
        raise ConfigError(f"a race of {entrants} configurations at alpha {self.alpha:g} cannot send any out within "
                          f"hydra.sweeper.max_rounds={self.max_rounds} seeds ({pairs} pair{'s share' if pairs > 1 else ' takes'} the "
                          "alpha): "
                          f"raise it to at least {enough}, or race fewer (hydra/sweeper=halving narrows a grid first)")

    def plan(self) -> Dict[str, object]:
        """What race.json keeps of these settings (a resume with other looks is refused: docs/time-to-target.md)."""
        return {"min_rounds": self.min_rounds, "max_rounds": self.max_rounds, "alpha": self.alpha, "cap": self.cap,
                "cap_after": self.cap_after, "max_wall_s": self.max_wall_s}


def planned(record: "RaceRecord") -> RaceSettings:
    """The settings a race was planned with, from its record (older records lack the newer keys)."""
    known = {f.name for f in fields(RaceSettings)}
    return RaceSettings(**{k: v for k, v in record.settings.items() if k in known})


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
    winner: Optional[int] = None  # the one left when every other was sent out by a test
    last_standing: Optional[int] = None  # the one left when another failed: untested against it
    tie: Optional[List[int]] = None
    survivors: List[int] = field(default_factory=list)
    eliminated: Dict[str, dict] = field(default_factory=dict)  # "N": {round, p, by, reason}; p None: it failed
    stopped_by: Optional[str] = None  # winner | last_standing | max_rounds | max_wall_s | all_failed; null: racing
    started: float = field(default_factory=time.time)
    ended: Optional[float] = None
    parallel: int = 1
    lr_search: Optional[dict] = None  # {folder, suggestion, jobs}: the one range test those jobs reused (shared_lr.py)
    schema_version: int = SCHEMA_VERSION

    KEYS = ("schema_version", "settings", "seed_base", "combos", "baseline", "entrants", "folder", "rounds", "winner",
            "last_standing", "tie", "survivors", "eliminated", "stopped_by", "started", "ended", "parallel",
            "lr_search")

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.KEYS}

    @classmethod
    def from_json(cls, data: dict) -> "RaceRecord":
        record = cls(**{k: data[k] for k in cls.KEYS if k in data})
        record.schema_version = data.get("schema_version", data.get("version", SCHEMA_VERSION))
        return record

    @property
    def older(self) -> bool:
        """Decided by an earlier fastpipe's tests (Friedman/Conover, a one-sided Wilcoxon test)."""
        return self.schema_version in OLDER

    def write(self, sweep_dir: Path) -> None:
        write_json_atomic(Path(sweep_dir) / FILE, self.to_json())

    def times(self, num: int) -> List[Optional[float]]:
        """Configuration ``num``'s time per round it ran (None = a miss)."""
        return [r["values"][str(num)] for r in self.rounds if str(num) in r["values"]]

    def wall_s(self) -> float:
        """Seconds the finished rounds took (a pause between a stop and its resume is not counted)."""
        return sum(r["ended"] - r["started"] for r in self.rounds if r.get("ended"))


class DamagedRace(ConfigError):
    """race.json is there but cannot be what a race wrote: one line, nothing written."""


def read(sweep_dir: Path) -> Optional[RaceRecord]:
    """The sweep folder's race record, or None (another kind of sweep); DamagedRace when race.json is
    there but is not a whole record of this sweep's rounds (``problem``)."""
    path = Path(sweep_dir) / FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise _damaged(path, f"unreadable ({type(exc).__name__})") from None
    trouble = problem(data, Path(sweep_dir))
    if trouble:
        raise _damaged(path, trouble)
    return RaceRecord.from_json(data)


PLAN = ("alpha", "max_rounds", "clock")  # a resume may change the rest (min_rounds, the caps, max_wall_s)


def earlier_race(sweep_dir: Path, record: RaceRecord) -> Optional[RaceRecord]:
    """The record a stopped race left in ``sweep_dir`` (None: none, or a damaged one, which the resumed
    rounds write anew); ConfigError when it planned other looks than ``record`` (its settings or grid):
    a race's tests are planned before its data, so a finished tie raced on with a larger max_rounds is a
    new race, with its own alpha."""
    try:
        earlier = read(sweep_dir)
    except DamagedRace:
        return None
    if earlier is None:
        return None
    if earlier.older:
        raise ConfigError(f"{Path(sweep_dir) / FILE} is a race an earlier fastpipe decided with other tests: its rounds "
                          "cannot go on under this one's; race the configurations again in a new hydra.sweep.dir")
    names = {"clock": "report.target_clock"}  # the looks' plan: what the level and the times depend on
    changed = [k for k in PLAN if record.settings.get(k) != earlier.settings.get(k)]
    if changed or earlier.combos != record.combos or earlier.seed_base != record.seed_base:
        what = (", ".join(f"{names.get(k, 'hydra.sweeper.' + k)}={earlier.settings.get(k)} (now "
                          f"{record.settings.get(k)})" for k in changed) if changed else "its grid or its seed")
        raise ConfigError(f"{Path(sweep_dir) / FILE} is a race planned with {what}: a race's looks are fixed before "
                          "its seeds are seen, so raising max_rounds after a tie (or changing the alpha) would spend "
                          "its alpha again. Race the tied configurations as a new race in a new hydra.sweep.dir, or "
                          "resume this one with its own settings")
    return earlier


def _damaged(path: Path, what: str) -> DamagedRace:
    return DamagedRace(f"{path} is damaged: {what}; nothing was written. Run the race's command again with "
                       "sweep.resume=true (its finished runs are kept, not retrained, and race.json is written anew "
                       f"from them), or move {FILE} aside to report the folder as a grid")


def problem(data, sweep_dir: Path) -> Optional[str]:
    """What makes ``data`` (race.json's content) no record of the race in ``sweep_dir``, or None."""
    if not isinstance(data, dict):
        return f"it holds a JSON {type(data).__name__}, not an object"
    version = data.get("schema_version", data.get("version"))  # before 3: "version"
    if version not in OLDER + (SCHEMA_VERSION,):
        return (f"schema_version {version!r}, this fastpipe reads {SCHEMA_VERSION} and the older "
                f"{', '.join(map(str, OLDER))}" if version is not None else "no schema_version (not written by a race)")
    kinds = {"settings": dict, "seed_base": int, "combos": list, "entrants": list, "rounds": list,
             "eliminated": dict, "folder": str}
    for key, kind in kinds.items():
        if not isinstance(data.get(key), kind):
            return f"{key!r} is missing or not a {kind.__name__}"
    combos, folder = data["combos"], data["folder"]
    if not all(isinstance(n, int) and 0 <= n < len(combos) for n in data["entrants"]):
        return "its entrants are not configurations of its grid"
    for i, r in enumerate(data["rounds"]):
        if not (isinstance(r, dict) and r.get("round") == i and isinstance(r.get("jobs"), list)
                and isinstance(r.get("values"), dict)):
            return f"round {i} is not a whole round"
        if not all(n in data["entrants"] for n in r["jobs"]):
            return f"round {i} names configurations that are not entrants"
        missing = [n for n in r["jobs"] if n not in (r.get("failed") or [])
                   and not (sweep_dir / round_folder(n, i, folder)).is_dir()]
        if missing:
            return f"round {i}'s folder of configuration {missing[0]} ({round_folder(missing[0], i, folder)}) is missing"
    return None


def round_cap(record: RaceRecord, survivors: List[int], cap: Optional[float], cap_after: int) -> Optional[float]:
    """The next round's cap in training-clock seconds: ``cap`` x the leader's median training time over
    the finished rounds (a miss the slowest), once the leader reached the target in ``cap_after`` of
    them; None without a cap, before that, or while the leader's median is a miss."""
    if cap is None or not record.rounds:
        return None
    leader = leader_of(record, survivors)
    times = [r["training_s"].get(str(leader)) for r in record.rounds if str(leader) in r["values"]]
    if sum(t is not None for t in times) < cap_after:
        return None
    centre = median_time(times)
    return None if centre is None else cap * centre


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
    """After a round: drop the failed, test every pair of survivors once the first look is due
    (stats.judge), fill ``entry`` and the record's ``eliminated``; returns the survivors for the next round."""
    for n, reason in failed.items():
        record.eliminated[str(n)] = {"round": entry["round"], "p": None, "reason": f"failed: {reason}"}
    alive = [n for n in survivors if n not in failed]
    entry.update(failed=sorted(failed), test=None, level=None, pairs={}, eliminated=[])
    if not alive:
        return alive
    rounds = [r for r in record.rounds if all(str(n) in r["values"] for n in alive)]
    times = {n: [_inf(r["values"][str(n)]) for r in rounds] for n in alive}
    entry["leader"] = ranking(times)[0]
    if len(rounds) < settings.first_look(len(record.entrants)) or len(alive) < 2:
        return alive
    verdict = stats.judge(times, settings.alpha, len(record.entrants), settings.max_rounds)
    entry.update(test="sign", level=verdict.level, pairs=verdict.pairs, eliminated=sorted(verdict.out))
    for n, why in verdict.out.items():
        record.eliminated[str(n)] = {
            "round": entry["round"], "p": why["p"], "by": why["by"],
            "reason": f"slower than job {why['by']}: sooner in {why['losses']} of the {why['wins'] + why['losses']} "
                      f"seeds where they differed ({p_text(why['p'])}, within the level {verdict.level:.2g} that "
                      f"holds alpha {settings.alpha:g} over the race)"}
    return [n for n in alive if n not in verdict.out]


def finish(record: RaceRecord, survivors: List[int], stopped_by: str) -> None:
    """The race's end: one survivor is the winner when every other entrant was sent out by a test, the
    last standing when one failed; more form a tie set, ranked by median time."""
    order = sorted(survivors, key=lambda n: (_inf(median_time(record.times(n))), n))
    record.survivors = order
    tested = all(e.get("p") is not None for e in record.eliminated.values())
    record.winner = order[0] if len(order) == 1 and tested else None
    record.last_standing = order[0] if len(order) == 1 and not tested else None
    record.tie = order if len(order) > 1 else None
    record.stopped_by = ("all_failed" if not order else "last_standing" if record.last_standing is not None
                         else stopped_by)
    record.ended = time.time()
