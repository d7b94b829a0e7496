"""``hydra/sweeper=halving`` with ``report.objective=time_to_target``: rounds by training-clock budget,
each combination in its own folder, resumed from its own checkpoint when promoted
(fastpipe.sweeps.halving_target), then its contenders raced over seeds (fastpipe.sweeps.race_run).

A mixin of HalvingSweeper (halving_sweeper.py), which gives it the launcher, the settings and the
record; not a plugin of its own."""

import logging
import time
from pathlib import Path
from typing import List, Optional

from omegaconf import OmegaConf

from hydra_plugins.fastpipe_sweeps.grid import refuse

log = logging.getLogger(__name__)


class TargetHalving:
    def _sweep_to_target(self, plan, combos, configs, base: int, sweep_dir: Path, extra: List[str]) -> list:
        """The rounds, the finalists' runs, then the contenders' race (module docstring)."""
        from fastpipe.sweeps.halving import HalvingRecord

        self._check_target_settings()
        record = HalvingRecord(settings={"mode": "time_to_target", "finalist_rounds": self.finalist_rounds,
                                         "keep": plan.keep, "finalists": plan.finalists, "budget_s": self.budget_s,
                                         "inductor_cache": self.inductor_cache},
                               combos=combos, baseline=base, probe_keys=["train.time_budget_s", "train.resume"],
                               parallel=self.parallel())
        record.write(sweep_dir)
        job = {n: combos[n] + [f"hydra.sweep.subdir={n}"] + extra for n in range(len(combos))}
        alive = [n for n in range(len(combos)) if n != base]
        returns: List[list] = []
        first, plan_budgets = self._budgets(record, plan, job, alive, sweep_dir, returns)
        done = False
        for round_no, budget in enumerate(plan_budgets, start=1):
            alive, done = self._target_round(record, plan, job, first, alive, round_no, budget, sweep_dir, returns)
            first = []
            if done or len(alive) <= plan.finalists:
                break
        record.finals = [base] + sorted(alive)
        record.finals_started = time.time()
        record.write(sweep_dir)
        finals = first + ([job[n] + (["train.resume=auto"] if record.rounds else []) for n in sorted(alive)]
                          if not done else [])
        if finals:  # the finalists train on to the end of their runs (with the baseline, if no round ran)
            log.info(f"Finalists {sorted(alive) if not done else []} train on to the end of their runs")
            returns.append(self.launch_batch(finals, "the finalists' runs"))
        record.finals_ended = time.time()
        record.write(sweep_dir)
        reached = {n for r in record.rounds for n in r.get("reached") or []}
        self._race_finalists(combos, configs, base, sorted(set(record.finals) | reached), sweep_dir, extra, returns)
        record.ended = time.time()
        record.write(sweep_dir)
        return returns

    def _check_target_settings(self) -> None:
        """budget_s and finalist_rounds refused in one line before any job runs."""
        from fastpipe.errors import ConfigError

        if self.budget_s is not None and not float(self.budget_s) > 0:
            refuse(ConfigError(f"hydra.sweeper.budget_s={self.budget_s} must be > 0 (training-clock seconds of "
                               "round 1), or null: from the baseline's time to the target"))
        self._finalist_race()

    def _budgets(self, record, plan, job, alive: List[int], sweep_dir: Path, returns: list):
        """(the baseline's job when it trains beside round 1, else nothing; each round's budget). Without
        hydra.sweeper.budget_s the baseline trains first and its time to the target sets the budgets."""
        from fastpipe.errors import ConfigError
        from fastpipe.record import results
        from fastpipe.sweeps.halving_target import budgets, rounds_needed

        base = record.baseline
        rounds = rounds_needed(len(alive), plan.keep, plan.finalists)
        first = [job[base]] if self.budget_s is not None or not rounds else []  # the baseline beside round 1
        if not first:
            log.info(f"Time to target: the baseline #{base} trains first; its time sets the rounds' budgets")
            returns.append(self.launch_batch([job[base]], "the baseline's run"))
        base_metrics = results.read(sweep_dir / str(base)) or {}
        reference = (base_metrics.get("target") or {}).get("seconds")
        if rounds and self.budget_s is None and not reference:
            refuse(ConfigError(f"the baseline (job {base}) has no training time to set the budgets from (status "
                               f"{base_metrics.get('status')}: {base_metrics.get('reason')}); give "
                               "hydra.sweeper.budget_s=SECONDS"))
        record.settings["budgets_s"] = planned = (budgets(len(alive), plan.keep, plan.finalists, self.budget_s,
                                                          reference) if rounds else [])
        return first, planned

    def _target_round(self, record, plan, job, first, alive: List[int], round_no: int, budget: float,
                      sweep_dir: Path, returns: list):
        """One round to ``budget`` seconds of training; returns (those kept, whether someone reached the target)."""
        from fastpipe.record import results
        from fastpipe.sweeps.halving_target import judge

        resume = ["train.resume=auto"] if round_no > 1 else []
        batch = first + [job[n] + [f"train.time_budget_s={budget:.6g}"] + resume for n in alive]
        entry = {"round": round_no, "budget_s": budget, "jobs": list(alive), "started": time.time()}
        log.info(f"Round {round_no}: {len(alive)} combination(s) train to {budget:.1f} s on the training clock")
        returns.append(self.launch_batch(batch, f"round {round_no} (to {budget:.1f} s of training)"))
        ran = {n: results.read(sweep_dir / str(n)) for n in alive}
        outcome = judge(ran, plan.keep, plan.finalists, _higher_is_better(ran.values()))
        entry.update(ended=time.time(), kept=outcome.kept, dropped=outcome.dropped, reached=outcome.reached,
                     finished=outcome.finished, failed=outcome.failed, values=outcome.values, cutoff=outcome.cutoff)
        record.rounds.append(entry)
        record.write(sweep_dir)
        log.info(f"Round {round_no}: reached {outcome.reached}, kept {outcome.kept}, dropped {outcome.dropped}")
        return outcome.kept, outcome.done

    def _race_finalists(self, combos, configs, base: int, contenders: List[int], sweep_dir: Path, extra: List[str],
                        returns: list) -> None:
        """The contenders left by the halving rounds (the finalists, the baseline, whoever reached the
        target) raced over ``finalist_rounds`` seeds in ``race/N/round-K/``, so that the winner is not one
        run's fluke; hydra.sweeper.finalist_rounds=0 names the winner from the halving runs alone."""
        from fastpipe.sweeps.race import read
        from fastpipe.sweeps.race_run import new_record, run_race

        if not self.finalist_rounds or len(contenders) < 2:
            return
        settings = self._finalist_race()
        if any(int(c.report.repeats) != 1 for c in configs):
            extra = extra + ["report.repeats=1"]  # the race's seeds are its repeats
        clock = str(OmegaConf.select(self.config, "report.target_clock", default="training"))
        record = new_record(combos, int(configs[0].seed), base, settings, clock, self.parallel(), folder="race/",
                            entrants=contenders)
        log.info(f"Racing the contenders {contenders} over {self.finalist_rounds} seeds before naming a winner")
        run_race(lambda batch, stage: returns.append(self.launch_batch(batch, f"the finalists' race, {stage}")),
                 record, settings, sweep_dir, clock, extra, earlier=read(sweep_dir))

    def _finalist_race(self) -> Optional[object]:
        """The finalists' race settings (None: hydra.sweeper.finalist_rounds=0, no race)."""
        from fastpipe.errors import ConfigError
        from fastpipe.sweeps.race import RaceSettings

        if not self.finalist_rounds:
            return None
        try:
            return RaceSettings(min_rounds=self.finalist_rounds, max_rounds=self.finalist_rounds)
        except ConfigError:
            refuse(ConfigError(f"hydra.sweeper.finalist_rounds={self.finalist_rounds} must be 0 (no race) or >= 2 "
                               "seeds (5, the default, is the fewest a paired test can separate two with)"))


def _higher_is_better(records) -> bool:
    """The primary metric's direction, from the first record that names it (accuracy: higher)."""
    for m in records:
        primary = (m or {}).get("primary_metric") or {}
        if "higher_is_better" in primary:
            return bool(primary["higher_is_better"])
    return True
