"""Successive halving by time to target: ``hydra/sweeper=halving report.objective=time_to_target``.

Every combination but the baseline trains in its own folder (``<sweep>/N/``, where a grid puts it)
until the training clock passes the round's budget (``train.time_budget_s``), then stops cleanly with
a checkpoint. After each round:

- if any combination has reached the target, every one still short of it is dropped: its clock
  already passed the time the other needed, so it cannot win; the sweep ends;
- else the paused ones are ranked by their best primary held-out metric so far (in its direction)
  and the best ``keep`` share goes on (never fewer than ``finalists``; at least one is dropped while
  more are left). A promoted combination resumes from its own last checkpoint in its own folder
  (``train.resume=auto``): no step runs twice and its training clock continues (the restart's
  start-up is not on it; a re-compilation is, unless Inductor's cache served it).

A combination that ends on its own (its run's length, early stopping, a failure) is finished and
leaves the race. The finalists left after the last round train on to the end of their runs.

The budgets: ``hydra.sweeper.budget_s`` is round 1's, and each next round's is ``1/keep`` times the
one before. Without it the baseline trains first, in full, and its time to the target T (or, if it
missed, the training seconds its whole run took) fixes them: the last round's budget is T, each
earlier one ``keep`` times the next: a combination still short of the target at T cannot beat the
baseline, so no round runs longer than the time to beat.

Then the contenders left (the finalists, the baseline, whoever reached the target) are raced over
``hydra.sweeper.finalist_rounds`` seeds (sweeps/race/), so that the winner is not one run's fluke.
``run_to_target`` runs it all through any launcher.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from typing import Dict, List, Optional

from fastpipe.errors import ConfigError
from fastpipe.record import results as run_results
from fastpipe.sweeps.halving.plan import Grid, HalvingRecord, HalvingSettings, Launch
from fastpipe.sweeps.race.rounds import RaceSettings, earlier_race
from fastpipe.sweeps.race.run import new_record, run_race

log = logging.getLogger(__name__)


@dataclass
class TargetSettings:
    """The sweeper's settings for time to target, refused in one line before any job runs."""

    budget_s: Optional[float] = None  # round 1's training-clock budget; None: from the baseline's time
    finalist_rounds: int = 10  # seeds the contenders are raced over at most (the race's max_rounds); 0 = no race

    def __post_init__(self) -> None:
        if self.budget_s is not None and not float(self.budget_s) > 0:
            raise ConfigError(f"hydra.sweeper.budget_s={self.budget_s} must be > 0 (training-clock seconds of "
                              "round 1), or null: from the baseline's time to the target")
        self.race()

    def race(self) -> Optional[RaceSettings]:
        """The contenders' race settings (None: finalist_rounds=0, no race)."""
        if not self.finalist_rounds:
            return None
        settings = RaceSettings(max_rounds=max(self.finalist_rounds, 1))
        try:
            settings.check(2)
        except ConfigError:
            raise ConfigError(f"hydra.sweeper.finalist_rounds={self.finalist_rounds} must be 0 (no race: the winner is "
                              f"untested, no best.yaml) or at least {RaceSettings().first_look(2)} seeds (the fewest in "
                              "which a race can tell two contenders apart; 10, the default)") from None
        return settings


def n_kept(alive: int, keep: float, finalists: int) -> int:
    """How many of ``alive`` ranked combinations go on: the ``keep`` share, at least ``finalists``,
    and at least one fewer than ``alive`` while more than ``finalists`` are left."""
    n = max(finalists, math.ceil(alive * keep))
    if alive > finalists:
        n = min(n, alive - 1)
    return min(n, alive)


def rounds_needed(alive: int, keep: float, finalists: int) -> int:
    """Rounds until ``finalists`` or fewer are left, when none of them ends early."""
    rounds = 0
    while alive > finalists:
        alive, rounds = n_kept(alive, keep, finalists), rounds + 1
    return rounds


def budgets(alive: int, keep: float, finalists: int, budget_s: Optional[float] = None,
            reference_s: Optional[float] = None) -> List[float]:
    """Each round's training-clock budget (module docstring): from ``budget_s`` upwards by ``1/keep``,
    or from the baseline's ``reference_s`` downwards by ``keep``. At least one round."""
    rounds = max(1, rounds_needed(alive, keep, finalists))
    if budget_s is not None:
        return [budget_s / keep ** r for r in range(rounds)]
    return [reference_s * keep ** (rounds - 1 - r) for r in range(rounds)]


def reached(metrics: Optional[dict]) -> bool:
    return isinstance(metrics, dict) and metrics.get("status") == "ok" and bool((metrics.get("target") or {}).get("reached"))


def paused(metrics: Optional[dict]) -> bool:
    """Stopped by the round's budget, short of the target: it may go on."""
    return (isinstance(metrics, dict) and metrics.get("status") == "ok" and metrics.get("stopped_by") == "time_budget"
            and not reached(metrics))


@dataclass
class TargetRound:
    kept: List[int]  # paused, among the best: resume in the next round
    dropped: List[int]  # paused, not among the best (or slower than one that reached): status pruned
    reached: List[int]  # reached the target this round: finished
    finished: List[int]  # ended on their own without reaching it (run length, early stop): finished
    failed: List[int]  # not ok: their own status
    values: Dict[str, Optional[float]]  # each one's best primary metric so far
    cutoff: Optional[float]  # the worst kept value
    done: bool  # someone reached the target: nobody still short of it can win


def judge(results: Dict[int, Optional[dict]], keep: float, finalists: int, higher_is_better: bool,
          any_reached_before: bool = False) -> TargetRound:
    """One round's outcome from each combination's metrics.json."""
    def value(m):  # the best evaluation so far (the target record's), else the last one's
        best = ((m or {}).get("target") or {}).get("best_value")
        return best if best is not None else ((m or {}).get("primary_metric") or {}).get("value")

    values = {str(n): value(m) for n, m in results.items()}
    hit = sorted(n for n, m in results.items() if reached(m))
    waiting = [n for n, m in results.items() if paused(m)]
    failed = sorted(n for n, m in results.items() if not isinstance(m, dict) or m.get("status") != "ok")
    finished = sorted(n for n in results if n not in hit and n not in waiting and n not in failed)
    if hit or any_reached_before:
        return TargetRound([], sorted(waiting), hit, finished, failed, values, None, True)
    sign = 1.0 if higher_is_better else -1.0
    order = sorted(waiting, key=lambda n: (value(results[n]) is None, -sign * (value(results[n]) or 0.0), n))
    k = n_kept(len(order), keep, finalists)
    kept = order[:k]
    return TargetRound(kept, order[k:], hit, finished, failed, values,
                       value(results[kept[-1]]) if kept else None, False)


def run_to_target(launch: Launch, plan: HalvingSettings, grid: Grid, target: TargetSettings, clock: str,
                  inductor_cache: Optional[str] = None) -> HalvingRecord:
    """The rounds, the finalists' runs, then the contenders' race (module docstring); returns the record."""
    record = HalvingRecord(settings={"mode": "time_to_target", "finalist_rounds": target.finalist_rounds,
                                     "keep": plan.keep, "finalists": plan.finalists, "budget_s": target.budget_s,
                                     "inductor_cache": inductor_cache},
                           combos=grid.combos, baseline=grid.baseline,
                           probe_keys=["train.time_budget_s", "train.resume"], parallel=grid.parallel)
    record.write(grid.folder)
    job = {n: grid.combos[n] + [f"hydra.sweep.subdir={n}"] + grid.extra for n in range(len(grid.combos))}
    alive = [n for n in range(len(grid.combos)) if n != grid.baseline]
    first, planned = _budgets(launch, record, plan, grid, job, alive, target.budget_s)
    done = False
    for round_no, budget in enumerate(planned, start=1):
        alive, done = _round(launch, record, plan, grid, job, first, alive, round_no, budget)
        first = []
        if done or len(alive) <= plan.finalists:
            break
    record.finals = [grid.baseline] + sorted(alive)
    record.finals_started = time.time()
    record.write(grid.folder)
    finals = first + ([job[n] + (["train.resume=auto"] if record.rounds else []) for n in sorted(alive)]
                      if not done else [])
    if finals:  # the finalists train on to the end of their runs (with the baseline, if no round ran)
        log.info(f"Finalists {sorted(alive) if not done else []} train on to the end of their runs")
        launch(finals, "the finalists' runs")
    record.finals_ended = time.time()
    record.write(grid.folder)
    reached_any = {n for r in record.rounds for n in r.get("reached") or []}
    _race_contenders(launch, grid, target, sorted(set(record.finals) | reached_any), clock)
    record.ended = time.time()
    record.write(grid.folder)
    return record


def _budgets(launch: Launch, record: HalvingRecord, plan: HalvingSettings, grid: Grid, job: dict, alive: List[int],
             budget_s: Optional[float]):
    """(the baseline's job when it trains beside round 1, else nothing; each round's budget). Without
    hydra.sweeper.budget_s the baseline trains first and its time to the target sets the budgets."""
    base = record.baseline
    rounds = rounds_needed(len(alive), plan.keep, plan.finalists)
    first = [job[base]] if budget_s is not None or not rounds else []  # the baseline beside round 1
    if not first:
        log.info(f"Time to target: the baseline #{base} trains first; its time sets the rounds' budgets")
        launch([job[base]], "the baseline's run")
    base_metrics = run_results.read(grid.folder / str(base)) or {}
    reference = (base_metrics.get("target") or {}).get("seconds")
    if rounds and budget_s is None and not reference:
        raise ConfigError(f"the baseline (job {base}) has no training time to set the budgets from (status "
                          f"{base_metrics.get('status')}: {base_metrics.get('reason')}); give "
                          "hydra.sweeper.budget_s=SECONDS")
    record.settings["budgets_s"] = planned = (budgets(len(alive), plan.keep, plan.finalists, budget_s, reference)
                                              if rounds else [])
    return first, planned


def _round(launch: Launch, record: HalvingRecord, plan: HalvingSettings, grid: Grid, job: dict, first: list,
           alive: List[int], round_no: int, budget: float):
    """One round to ``budget`` seconds of training; returns (those kept, whether someone reached the target)."""
    resume = ["train.resume=auto"] if round_no > 1 else []
    batch = first + [job[n] + [f"train.time_budget_s={budget:.6g}"] + resume for n in alive]
    entry = {"round": round_no, "budget_s": budget, "jobs": list(alive), "started": time.time()}
    log.info(f"Round {round_no}: {len(alive)} combination(s) train to {budget:.1f} s on the training clock")
    launch(batch, f"round {round_no} (to {budget:.1f} s of training)")
    ran = {n: run_results.read(grid.folder / str(n)) for n in alive}
    outcome = judge(ran, plan.keep, plan.finalists, _higher_is_better(ran.values()))
    entry.update(ended=time.time(), kept=outcome.kept, dropped=outcome.dropped, reached=outcome.reached,
                 finished=outcome.finished, failed=outcome.failed, values=outcome.values, cutoff=outcome.cutoff)
    record.rounds.append(entry)
    record.write(grid.folder)
    log.info(f"Round {round_no}: reached {outcome.reached}, kept {outcome.kept}, dropped {outcome.dropped}")
    return outcome.kept, outcome.done


def _race_contenders(launch: Launch, grid: Grid, target: TargetSettings, contenders: List[int], clock: str) -> None:
    """The contenders raced over ``finalist_rounds`` seeds in ``race/N/round-K/``; finalist_rounds=0 names
    the winner from the halving runs alone."""
    settings = target.race()
    if settings is None or len(contenders) < 2:
        return
    extra = list(grid.extra)
    if any(int(c.report.repeats) != 1 for c in grid.configs):
        extra.append("report.repeats=1")  # the race's seeds are its repeats
    enough = settings.enough_rounds(len(contenders))
    if enough > settings.max_rounds:  # more contenders than finalist_rounds can separate: planned before any seed
        log.info(f"{len(contenders)} contenders need {enough} seeds before one can be sent out: racing up to {enough}")
        settings = replace(settings, max_rounds=enough)
    record = new_record(grid.combos, int(grid.configs[0].seed), grid.baseline, settings, clock, grid.parallel,
                        folder="race/", entrants=contenders)
    earlier = earlier_race(grid.folder, record)  # a resume with other looks is refused, as the race sweeper's is
    log.info(f"Racing the contenders {contenders} over at most {settings.max_rounds} seeds before naming a winner")
    run_race(lambda batch, stage: launch(batch, f"the finalists' race, {stage}"), record, settings, grid.folder,
             clock, extra, earlier=earlier)


def _higher_is_better(records) -> bool:
    """The primary metric's direction, from the first record that names it (accuracy: higher)."""
    for m in records:
        primary = (m or {}).get("primary_metric") or {}
        if "higher_is_better" in primary:
            return bool(primary["higher_is_better"])
    return True
