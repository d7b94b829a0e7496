"""A race's rounds, launched through any launcher (fastpipe/sweeps/race/rounds.py says what a round is).

``run_race`` is what ``hydra/sweeper=race`` runs over its grid and ``hydra/sweeper=halving`` over its
finalists: it needs only a function that launches a batch of jobs (each a list of overrides) and the
folders those jobs write their metrics.json into. Under ``sweep.resume=true`` the sweeper launches
the same rounds again: every job that finished ok is skipped by the job itself (fastpipe/__main__.py),
so the rounds, caps and tests come out as they did, and the first unfinished round goes on.
"""
from __future__ import annotations

import logging
import random
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

from fastpipe.launch.repeats import combined_record
from fastpipe.record import results
from fastpipe.sweeps.race import shared_lr
from fastpipe.sweeps.race.rounds import (RaceRecord, RaceSettings, decide_round, finish, round_cap, round_folder,
                                  run_time)

log = logging.getLogger(__name__)

Launch = Callable[[List[List[str]], str], object]  # (batch of jobs' overrides, what the batch is) -> anything


def round_batch(record: RaceRecord, survivors: List[int], round_no: int, cap_s: Optional[float],
                extra: List[str], sweep_dir: Path = Path(".")) -> List[List[str]]:
    """Each survivor's overrides for round ``round_no``: its own, the round's seed, folder and cap. The
    order is shuffled each round (seeded by the round's seed, so a resume runs the same order): whatever
    running first or later does to a time (a cold machine, a cache the first job fills), it falls on
    each configuration of a pair alike, which keeps their sign test fair."""
    seed = record.seed_base + round_no
    order = list(survivors)
    random.Random(seed).shuffle(order)
    batch = []
    for n in order:
        own = [o for o in record.combos[n] if not o.lstrip("+~").startswith("seed=")]
        batch.append(own + [f"seed={seed}", f"hydra.sweep.subdir={round_folder(n, round_no, record.folder)}"]
                     + ([f"train.time_budget_s={cap_s:.6g}"] if cap_s else []) + extra
                     + shared_lr.reuse(sweep_dir, record.lr_search, n))
    return batch


def outcome(runs: Dict[int, Optional[dict]], clock: str, cap_s: Optional[float] = None):
    """A round's values (None = a miss), training-clock times, who reached, was capped, or failed (and why).
    A run whose training clock passed the round's cap is a miss, capped, even when the evaluation that
    ends a run stopped by its time budget reached the target after the cap: the cap is the same for
    every job of the round, and a time past it is one the race does not wait for. Its own metrics.json
    still says when it reached the target."""
    failed = {n: (m or {}).get("reason") or "no metrics.json: the run did not finish"
              for n, m in runs.items() if (m or {}).get("status") != "ok"}
    ran = {n: m for n, m in runs.items() if n not in failed}
    late = {n for n, m in ran.items() if cap_s is not None and (run_time(m, "training") or 0.0) > cap_s}
    values = {str(n): None if n in late else run_time(m, clock) for n, m in ran.items()}
    training = {str(n): None if n in late else run_time(m, "training") for n, m in ran.items()}
    reached = sorted(n for n in ran if values[str(n)] is not None)
    stopped = {n for n, m in ran.items() if m.get("stopped_by") == "time_budget" and n not in reached}
    capped = sorted(late | stopped)
    return values, training, reached, capped, failed


def as_raced(metrics: Optional[dict], capped: bool) -> Optional[dict]:
    """A round's metrics as the race counted them: a capped run that reached the target after the cap a miss."""
    target = (metrics or {}).get("target")
    if not capped or not target or not target.get("reached"):
        return metrics
    return dict(metrics, target=dict(target, reached=False))


def combine(sweep_dir: Path, record: RaceRecord, num: int) -> None:
    """``<folder>N/metrics.json``: configuration ``num``'s rounds combined as repeats are, each as the race
    counted it (as_raced), so the report's median agrees with race.json's."""
    rounds = [r for r in record.rounds if num in r["jobs"]]
    names = [round_folder(num, r["round"], "").split("/", 1)[1] for r in rounds]
    job_dir = Path(sweep_dir) / f"{record.folder}{num}"
    runs = [as_raced(results.read(job_dir / name), num in r.get("capped", ())) for r, name in zip(rounds, names)]
    known = [(m, name) for m, name in zip(runs, names) if m is not None]
    if known:
        combined = combined_record([m for m, _ in known], [name for _, name in known], len(known), raced=True)
        results.write(job_dir, combined)


def run_race(launch: Launch, record: RaceRecord, settings: RaceSettings, sweep_dir: Path, clock: str,
             extra: List[str] = (), earlier: Optional[RaceRecord] = None,
             sharing: List[int] = ()) -> RaceRecord:
    """Race every configuration of ``record.combos`` (module docstring); returns the finished record.
    ``earlier``: the record a stopped race left, whose rounds' wall-clock times are kept on resume;
    ``sharing``: the configurations that run the same range test (shared_lr.py): it runs first, once."""
    survivors, stopped_by = list(record.entrants), "max_rounds"
    record.write(sweep_dir)
    if sharing:
        launch([shared_lr.search_job(record.combos[sharing[0]])], "the range test")
        record.lr_search = dict(shared_lr.found(sweep_dir), jobs=sorted(sharing))
        log.info(f"Race: jobs {sorted(sharing)} train from the range test's suggestion "
                 f"{record.lr_search['suggestion']:.3g} ({shared_lr.FOLDER}/) times their factor")
    for round_no in range(settings.max_rounds):
        if settings.max_wall_s is not None and record.wall_s() >= settings.max_wall_s:
            stopped_by = "max_wall_s"
            break
        cap_s = round_cap(record, survivors, settings.cap, settings.cap_after)
        seed = record.seed_base + round_no
        entry = {"round": round_no, "seed": seed, "jobs": list(survivors), "cap_s": cap_s, "started": time.time()}
        log.info(f"Race round {round_no}: {len(survivors)} configuration(s) with seed {seed}"
                 + (f", capped at {cap_s:.1f} s of training" if cap_s else ""))
        launch(round_batch(record, survivors, round_no, cap_s, list(extra), sweep_dir), f"round {round_no} (seed {seed})")
        runs = {n: results.read(Path(sweep_dir) / round_folder(n, round_no, record.folder)) for n in survivors}
        values, training, reached, capped, failed = outcome(runs, clock, cap_s)
        entry.update(values=values, training_s=training, reached=reached, capped=capped,
                     told_nothing=len(values) > 1 and not reached)  # every pair ties in it
        record.rounds.append(entry)
        survivors = decide_round(record, entry, survivors, failed, settings)
        entry["ended"] = time.time()
        _keep_wall_clock(entry, earlier)
        for n in entry["jobs"]:
            combine(sweep_dir, record, n)
        record.write(sweep_dir)
        log.info(f"Race round {round_no}: leader {entry.get('leader')}, eliminated {entry['eliminated']}"
                 + (f", failed {entry['failed']}" if entry["failed"] else "") + f"; {len(survivors)} left")
        if len(survivors) <= 1:
            stopped_by = "winner"
            break
    finish(record, survivors, stopped_by)
    record.write(sweep_dir)
    return record


def _keep_wall_clock(entry: dict, earlier: Optional[RaceRecord]) -> None:
    """On resume, a round that had finished keeps the wall-clock times it took then (its jobs were skipped)."""
    if earlier is None:
        return
    old = next((r for r in earlier.rounds if r["round"] == entry["round"] and r.get("ended")), None)
    if old is not None and old["jobs"] == entry["jobs"] and old["seed"] == entry["seed"]:
        entry["started"], entry["ended"] = old["started"], old["ended"]


def new_record(combos: List[List[str]], seed_base: int, baseline: Optional[int], settings: RaceSettings,
               clock: str, parallel: int, folder: str = "", entrants: Optional[List[int]] = None) -> RaceRecord:
    """A race's record before its first round; ``entrants``: the grid numbers raced (default: all)."""
    return RaceRecord(settings=dict(settings.plan(), clock=clock),
                      seed_base=seed_base, combos=[list(c) for c in combos], baseline=baseline,
                      entrants=list(range(len(combos))) if entrants is None else sorted(entrants), folder=folder,
                      parallel=parallel)
