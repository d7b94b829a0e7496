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
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from hydra_plugins.fastpipe_sweeps.grid import GridSweeper, quote, refuse
from hydra_plugins.fastpipe_sweeps.halving_to_target import TargetHalving

log = logging.getLogger(__name__)


class HalvingSweeper(TargetHalving, GridSweeper):
    name = "halving sweep"
    resume_note = "the probes and full runs that finished are kept, a stopped job continues from its checkpoint"

    def __init__(self, probe_steps: int = 30, keep: float = 0.5, finalists: int = 2,
                 inductor_cache: Optional[str] = None, params: Optional[Dict[str, str]] = None,
                 budget_s: Optional[float] = None, finalist_rounds: int = 5) -> None:
        super().__init__(params)
        self.probe_steps, self.keep, self.finalists, self.budget_s = probe_steps, keep, finalists, budget_s
        self.inductor_cache, self.finalist_rounds = inductor_cache, finalist_rounds

    def sweep(self, arguments: List[str]) -> Any:
        from fastpipe.errors import ConfigError
        from fastpipe.sweeps.halving import HalvingSettings

        assert self.config is not None and self.hydra_context is not None
        try:
            plan = HalvingSettings(self.probe_steps, self.keep, self.finalists)
        except ConfigError as exc:
            refuse(exc)
        # Every job composed before any starts; each combination's own warm-up length sets its probes' length.
        combos, configs, sweep_dir = self.start(arguments)
        base = self.baseline(combos, configs)
        extra = []
        if self.inductor_cache:
            cache = Path(str(self.inductor_cache)).absolute()
            extra = [f"++hydra.job.env_set.TORCHINDUCTOR_CACHE_DIR={quote(str(cache))}"]
        if str(OmegaConf.select(self.config, "report.objective", default="")) == "time_to_target":
            return self._sweep_to_target(plan, combos, configs, base, sweep_dir, extra)
        return self._sweep_probes(plan, combos, configs, base, sweep_dir, extra)

    def _sweep_probes(self, plan, combos, configs, base: int, sweep_dir: Path, extra: List[str]) -> list:
        """Rounds of probes ranked by throughput (fastpipe.sweeps.halving), then the full runs."""
        from fastpipe.sweeps.halving import HalvingRecord

        record = HalvingRecord(settings={"probe_steps": plan.probe_steps, "keep": plan.keep,
                                         "finalists": plan.finalists, "inductor_cache": self.inductor_cache},
                               combos=combos, baseline=base, probe_keys=["train.max_steps", "report.repeats"],
                               parallel=self.parallel())
        record.write(sweep_dir)
        alive = [n for n in range(len(combos)) if n != base]
        log.info(f"Successive halving of {len(combos)} combinations: baseline #{base} runs in full; "
                 f"{len(alive)} probed ({plan.probe_steps} steps after warm-up in round 1), "
                 f"{plan.finalists} finalist(s)")
        returns: List[list] = []
        while len(alive) > plan.finalists:
            alive = self._probe_round(record, plan, combos, configs, alive, sweep_dir, extra, returns)
        record.finals = [base] + sorted(alive)
        record.finals_started = time.time()
        record.write(sweep_dir)
        log.info(f"Full runs: {record.finals} (the baseline first)")
        returns.append(self.launch_batch([combos[n] + [f"hydra.sweep.subdir={n}"] + extra for n in record.finals],
                                         "the full runs"))
        record.finals_ended = record.ended = time.time()
        record.write(sweep_dir)
        return returns

    def _probe_round(self, record, plan, combos, configs, alive: List[int], sweep_dir: Path, extra: List[str],
                     returns: list) -> List[int]:
        """One round: probe every combination still in, keep the fastest share; returns those kept."""
        from fastpipe.record import results
        from fastpipe.sweeps.halving import probe_folder, select

        round_no = len(record.rounds) + 1
        steady, folder = plan.probe_steps_in(round_no), probe_folder(round_no)
        batch = []
        for n in alive:
            probe = [f"train.max_steps={int(configs[n].measure.warmup_steps) + steady}"]
            if int(configs[n].report.repeats) != 1:
                probe.append("report.repeats=1")  # a probe ranks; repeats are for the full runs
            batch.append(combos[n] + probe + [f"hydra.sweep.subdir={folder}/{n}"] + extra)
        entry = {"round": round_no, "folder": folder, "steps": steady, "jobs": list(alive), "started": time.time()}
        log.info(f"Round {round_no}: {len(alive)} probes of {steady} steady-state steps")
        returns.append(self.launch_batch(batch, f"round {round_no} (its probes in {folder}/)"))
        probes = {n: results.read(sweep_dir / folder / str(n)) for n in alive}
        outcome = select(probes, plan.keep, plan.finalists)
        entry.update(ended=time.time(), kept=outcome.kept, dropped=outcome.dropped, failed=outcome.failed,
                     cutoff=outcome.cutoff, throughput={str(n): (m or {}).get("throughput") for n, m in probes.items()})
        record.rounds.append(entry)
        record.write(sweep_dir)
        log.info(f"Round {round_no}: kept {outcome.kept}, dropped {outcome.dropped}"
                 + (f", failed {outcome.failed}" if outcome.failed else ""))
        return outcome.kept
