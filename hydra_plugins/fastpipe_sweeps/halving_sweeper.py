"""``hydra/sweeper=halving``: successive halving of a grid on measured throughput, or with
``report.objective=time_to_target`` by time to the target, its contenders then raced over seeds.

The grid is the basic sweeper's (command-line lists and ``hydra.sweeper.params``, so ``+sweep=``
presets work), each combination numbered by its grid position. The plan and its rounds are
fastpipe.sweeps.halving's; this class hands them the grid and a way to launch a batch through whatever
launcher the sweep uses. Hydra's sweeper test suites (``BatchedSweeperTestSuite`` and the like) do not
apply: they expect a sweeper to run exactly the grid's jobs, while halving adds its own (the probes, the
finalists' full runs); this sweeper's tests are fastpipe's own.
"""

from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import OmegaConf

from fastpipe.record.overrides import quote
from hydra_plugins.fastpipe_sweeps.grid import GridSweeper, refuse


class HalvingSweeper(GridSweeper):
    name = "halving sweep"
    resume_note = "the probes and full runs that finished are kept, a stopped job continues from its checkpoint"

    def __init__(self, probe_steps: int = 30, keep: float = 0.5, finalists: int = 2,
                 inductor_cache: Optional[str] = None, params: Optional[Dict[str, str]] = None,
                 budget_s: Optional[float] = None, finalist_rounds: int = 10) -> None:
        super().__init__(params)
        self.settings = dict(probe_steps=probe_steps, keep=keep, finalists=finalists)
        self.target = dict(budget_s=budget_s, finalist_rounds=finalist_rounds)
        self.inductor_cache = inductor_cache

    def sweep(self, arguments: List[str]) -> Any:
        from fastpipe.errors import ConfigError
        from fastpipe.sweeps.halving.plan import Grid, HalvingSettings
        from fastpipe.sweeps.halving.by_throughput import run_probes
        from fastpipe.sweeps.halving.to_target import TargetSettings, run_to_target

        to_target = str(OmegaConf.select(self.config, "report.objective", default="")) == "time_to_target"
        returns: List[list] = []
        try:
            plan, target = HalvingSettings(**self.settings), TargetSettings(**self.target) if to_target else None
            combos, configs, sweep_dir = self.start(arguments)  # every job composed before any starts
            cache = self.inductor_cache and Path(str(self.inductor_cache)).absolute()
            grid = Grid(combos, configs, self.baseline(combos, configs), sweep_dir, parallel=self.parallel(),
                        extra=[f"++hydra.job.env_set.TORCHINDUCTOR_CACHE_DIR={quote(str(cache))}"] if cache else [])
            launch = lambda batch, stage: returns.append(self.launch_batch(batch, stage))  # noqa: E731
            if target is None:
                run_probes(launch, plan, grid, self.inductor_cache)
            else:
                clock = str(OmegaConf.select(self.config, "report.target_clock", default="training"))
                run_to_target(launch, plan, grid, target, clock, self.inductor_cache)
        except ConfigError as exc:
            refuse(exc)
        return returns
