"""``hydra/sweeper=halving``: successive halving of a grid on measured throughput, or with
``report.objective=time_to_target`` by time to the target (fastpipe.sweeps.halving_target).

The grid is the basic sweeper's (command-line lists and ``hydra.sweeper.params``, so ``+sweep=``
presets work), each combination numbered by its grid position. The plan (probes, rounds, who is
kept, full runs) is fastpipe.sweeps.halving's; this class composes the jobs, hands them to whatever
launcher the sweep uses (the basic one, ``hydra/launcher=gpus``, Slurm) one round at a time, and
writes ``halving.json`` after every round. A stop signal ends the sweep with exit code 75 and a line
saying which round it stopped in and that ``sweep.resume=true`` continues it.

Hydra's sweeper test suites (``hydra.test_utils.launcher_common_tests.BatchedSweeperTestSuite`` and
the like) do not apply: they expect a sweeper to run exactly the grid's jobs, while halving adds its
own (the probes, and the finalists' full runs after them); this sweeper's tests are fastpipe's own.
"""

import logging
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class HalvingSweeper(Sweeper):
    def __init__(self, probe_steps: int = 30, keep: float = 0.5, finalists: int = 2,
                 inductor_cache: Optional[str] = None, params: Optional[Dict[str, str]] = None,
                 budget_s: Optional[float] = None) -> None:
        super().__init__()
        self.probe_steps, self.keep, self.finalists, self.budget_s = probe_steps, keep, finalists, budget_s
        self.inductor_cache = inductor_cache
        self.params = params or {}
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.launcher = None
        self.job_idx = 0

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)

    # ------------------------------------------------------------------ the grid
    def _grid(self, arguments: List[str]) -> List[List[str]]:
        """Every combination, in the order (and so with the numbers) Hydra's basic sweeper gives them."""
        lines = [f"{k}={v}" for k, v in self.params.items()] + list(arguments)
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        (batch,) = BasicSweeper.split_arguments(parser.parse_overrides(lines), None)
        return [list(c) for c in batch]

    def _baseline(self, combos: List[List[str]], configs: List[DictConfig]) -> int:
        """The combination the report will call the baseline (report.baseline, else the first values)."""
        from fastpipe.config import job_choices
        from fastpipe.report.baseline import pick_baseline
        from fastpipe.report.jobs import Job, spec_from_config

        jobs = [Job(n, Path(str(n)), combo, {"choices": job_choices(c.hydra.runtime.choices, c)})
                for n, (combo, c) in enumerate(zip(combos, configs))]
        base = pick_baseline(jobs, spec_from_config(self.config))
        return 0 if base is None else base.num

    # ------------------------------------------------------------------ running
    def _launch(self, batch: List[List[str]], stage: str) -> list:
        from fastpipe.errors import EXIT_PREEMPTED
        from hydra_plugins.fastpipe_sweeps.gpus_launcher import GpusLauncher

        try:
            returns = self.launcher.launch(batch, initial_job_idx=self.job_idx)
        except SystemExit as exc:  # a job stopped by a signal (75) or Ctrl-C (130) ended the sweep
            if exc.code in (EXIT_PREEMPTED, 130) and not isinstance(self.launcher, GpusLauncher):  # it says so itself
                print(f"fastpipe: error: the halving sweep stopped during {stage}; run the same command with "
                      "sweep.resume=true to continue it (the probes and full runs that finished are kept, a "
                      "stopped job continues from its checkpoint)", file=sys.stderr, flush=True)
            raise
        self.job_idx += len(batch)
        for r in returns:
            _ = r.return_value  # an exception the job raised ends the sweep, as in the basic sweeper
        return list(returns)

    def sweep(self, arguments: List[str]) -> Any:
        from fastpipe.record import results
        from fastpipe.errors import ConfigError
        from fastpipe.sweeps.halving import HalvingRecord, HalvingSettings, probe_folder, select
        from hydra_plugins.fastpipe_sweeps.gpus_launcher import refuse

        assert self.config is not None and self.hydra_context is not None
        try:
            plan = HalvingSettings(self.probe_steps, self.keep, self.finalists)
        except ConfigError as exc:
            refuse(exc)
        combos = self._grid(arguments)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        # Compose every job before any starts (a bad override fails at once, as with the basic sweeper);
        # each combination's own warm-up length sets its probes' length.
        loader = self.hydra_context.config_loader
        configs = [loader.load_sweep_config(self.config, combo) for combo in combos]
        try:
            base = self._baseline(combos, configs)
        except ConfigError as exc:
            refuse(exc)
        extra = []
        if self.inductor_cache:
            cache = Path(str(self.inductor_cache)).absolute()
            extra = [f"++hydra.job.env_set.TORCHINDUCTOR_CACHE_DIR={_quote(str(cache))}"]
        if str(OmegaConf.select(self.config, "report.objective", default="")) == "time_to_target":
            return self._sweep_to_target(plan, combos, configs, base, sweep_dir, extra)
        record = HalvingRecord(settings={"probe_steps": plan.probe_steps, "keep": plan.keep,
                                         "finalists": plan.finalists, "inductor_cache": self.inductor_cache},
                               combos=combos, baseline=base, probe_keys=["train.max_steps", "report.repeats"],
                               parallel=len(getattr(self.launcher, "slots", None) or [None]))
        record.write(sweep_dir)
        alive = [n for n in range(len(combos)) if n != base]
        log.info(f"Successive halving of {len(combos)} combinations: baseline #{base} runs in full; "
                 f"{len(alive)} probed ({plan.probe_steps} steps after warm-up in round 1), "
                 f"{plan.finalists} finalist(s)")
        returns: List[list] = []
        round_no = 0
        while len(alive) > plan.finalists:
            round_no += 1
            steady, folder = plan.probe_steps_in(round_no), probe_folder(round_no)
            batch = []
            for n in alive:
                cfg = configs[n]
                probe = [f"train.max_steps={int(cfg.measure.warmup_steps) + steady}"]
                if int(cfg.report.repeats) != 1:
                    probe.append("report.repeats=1")  # a probe ranks; repeats are for the full runs
                batch.append(combos[n] + probe + [f"hydra.sweep.subdir={folder}/{n}"] + extra)
            entry = {"round": round_no, "folder": folder, "steps": steady, "jobs": list(alive),
                     "started": time.time()}
            log.info(f"Round {round_no}: {len(alive)} probes of {steady} steady-state steps")
            returns.append(self._launch(batch, f"round {round_no} (its probes in {folder}/)"))
            probes = {n: results.read(sweep_dir / folder / str(n)) for n in alive}
            outcome = select(probes, plan.keep, plan.finalists)
            entry.update(ended=time.time(), kept=outcome.kept, dropped=outcome.dropped, failed=outcome.failed,
                         cutoff=outcome.cutoff,
                         throughput={str(n): (m or {}).get("throughput") for n, m in probes.items()})
            record.rounds.append(entry)
            record.write(sweep_dir)
            log.info(f"Round {round_no}: kept {outcome.kept}, dropped {outcome.dropped}"
                     + (f", failed {outcome.failed}" if outcome.failed else ""))
            alive = outcome.kept
        record.finals = [base] + sorted(alive)
        record.finals_started = time.time()
        record.write(sweep_dir)
        log.info(f"Full runs: {record.finals} (the baseline first)")
        returns.append(self._launch([combos[n] + [f"hydra.sweep.subdir={n}"] + extra for n in record.finals],
                                    "the full runs"))
        record.finals_ended = record.ended = time.time()
        record.write(sweep_dir)
        return returns

    # ------------------------------------------------------------------ time to target
    def _sweep_to_target(self, plan, combos, configs, base: int, sweep_dir: Path, extra: List[str]) -> list:
        """Rounds by training-clock budget, each combination in its own folder, resumed from its own
        checkpoint when promoted (fastpipe.sweeps.halving_target)."""
        from fastpipe.record import results
        from fastpipe.sweeps.halving import HalvingRecord
        from fastpipe.sweeps.halving_target import budgets, judge, rounds_needed

        if self.budget_s is not None and not float(self.budget_s) > 0:
            from fastpipe.errors import ConfigError
            from hydra_plugins.fastpipe_sweeps.gpus_launcher import refuse

            refuse(ConfigError(f"hydra.sweeper.budget_s={self.budget_s} must be > 0 (training-clock seconds of "
                               "round 1), or null: from the baseline's time to the target"))
        alive = [n for n in range(len(combos)) if n != base]
        record = HalvingRecord(settings={"mode": "time_to_target", "keep": plan.keep, "finalists": plan.finalists,
                                         "budget_s": self.budget_s, "inductor_cache": self.inductor_cache},
                               combos=combos, baseline=base, probe_keys=["train.time_budget_s", "train.resume"],
                               parallel=len(getattr(self.launcher, "slots", None) or [None]))
        record.write(sweep_dir)
        job = {n: combos[n] + [f"hydra.sweep.subdir={n}"] + extra for n in range(len(combos))}
        returns: List[list] = []
        rounds = rounds_needed(len(alive), plan.keep, plan.finalists)
        first = [job[base]] if self.budget_s is not None or not rounds else []  # the baseline beside round 1
        if not first:
            log.info(f"Time to target: the baseline #{base} trains first; its time sets the rounds' budgets")
            returns.append(self._launch([job[base]], "the baseline's run"))
        base_metrics = results.read(sweep_dir / str(base)) or {}
        reference = (base_metrics.get("target") or {}).get("seconds")
        if rounds and self.budget_s is None and not reference:
            from fastpipe.errors import ConfigError
            from hydra_plugins.fastpipe_sweeps.gpus_launcher import refuse

            refuse(ConfigError(f"the baseline (job {base}) has no training time to set the budgets from (status "
                               f"{base_metrics.get('status')}: {base_metrics.get('reason')}); give "
                               "hydra.sweeper.budget_s=SECONDS"))
        record.settings["budgets_s"] = plan_budgets = budgets(len(alive), plan.keep, plan.finalists, self.budget_s,
                                                              reference) if rounds else []
        done = False
        for round_no, budget in enumerate(plan_budgets, start=1):
            resume = ["train.resume=auto"] if round_no > 1 else []
            batch = first + [job[n] + [f"train.time_budget_s={budget:.6g}"] + resume for n in alive]
            entry = {"round": round_no, "budget_s": budget, "jobs": list(alive), "started": time.time()}
            log.info(f"Round {round_no}: {len(alive)} combination(s) train to {budget:.1f} s on the training clock")
            returns.append(self._launch(batch, f"round {round_no} (to {budget:.1f} s of training)"))
            first = []
            ran = {n: results.read(sweep_dir / str(n)) for n in alive}
            outcome = judge(ran, plan.keep, plan.finalists, _higher_is_better(ran.values()))
            entry.update(ended=time.time(), kept=outcome.kept, dropped=outcome.dropped, reached=outcome.reached,
                         finished=outcome.finished, failed=outcome.failed, values=outcome.values,
                         cutoff=outcome.cutoff)
            record.rounds.append(entry)
            record.write(sweep_dir)
            log.info(f"Round {round_no}: reached {outcome.reached}, kept {outcome.kept}, dropped {outcome.dropped}")
            alive, done = outcome.kept, outcome.done
            if done or len(alive) <= plan.finalists:
                break
        record.finals = [base] + sorted(alive)
        record.finals_started = time.time()
        record.write(sweep_dir)
        finals = first + ([job[n] + (["train.resume=auto"] if record.rounds else []) for n in sorted(alive)]
                          if not done else [])
        if finals:  # the finalists train on to the end of their runs (with the baseline, if no round ran)
            log.info(f"Finalists {sorted(alive) if not done else []} train on to the end of their runs")
            returns.append(self._launch(finals, "the finalists' runs"))
        record.finals_ended = record.ended = time.time()
        record.write(sweep_dir)
        return returns


def _higher_is_better(records) -> bool:
    """The primary metric's direction, from the first record that names it (accuracy: higher)."""
    for m in records:
        primary = (m or {}).get("primary_metric") or {}
        if "higher_is_better" in primary:
            return bool(primary["higher_is_better"])
    return True
