"""What fastpipe's sweepers share: the grid of the basic sweeper, the baseline, launching a batch.

``GridSweeper`` is abstract (no ``sweep``), so Hydra's plugin scan does not list it as a sweeper of
its own; ``hydra/sweeper=halving`` and ``hydra/sweeper=race`` build on it.
"""

import sys
from pathlib import Path
from typing import Dict, List, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf


class GridSweeper(Sweeper):
    """A sweeper over the basic sweeper's grid that launches its own batches (halving rounds, race rounds)."""

    name = "sweep"  # how its stop message names it

    def __init__(self, params: Optional[Dict[str, str]] = None) -> None:
        super().__init__()
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

    def grid(self, arguments: List[str]) -> List[List[str]]:
        """Every combination, in the order (and so with the numbers) Hydra's basic sweeper gives them."""
        lines = [f"{k}={v}" for k, v in self.params.items()] + list(arguments)
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        (batch,) = BasicSweeper.split_arguments(parser.parse_overrides(lines), None)
        return [list(c) for c in batch]

    def start(self, arguments: List[str]):
        """The grid, its composed configs (a bad override fails at once, as with the basic sweeper) and
        the sweep folder with its ``multirun.yaml``."""
        combos = self.grid(arguments)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        loader = self.hydra_context.config_loader
        return combos, [loader.load_sweep_config(self.config, combo) for combo in combos], sweep_dir

    def baseline(self, combos: List[List[str]], configs: List[DictConfig]) -> int:
        """The combination the report will call the baseline (report.baseline, else the first values)."""
        from fastpipe.config import job_choices
        from fastpipe.errors import ConfigError
        from fastpipe.report.baseline import pick_baseline
        from fastpipe.report.sweep_folder import Job, spec_from_config

        jobs = [Job(n, Path(str(n)), combo, {"choices": job_choices(c.hydra.runtime.choices, c)})
                for n, (combo, c) in enumerate(zip(combos, configs))]
        try:
            base = pick_baseline(jobs, spec_from_config(self.config))
        except ConfigError as exc:
            refuse(exc)
        return 0 if base is None else base.num

    def launch_batch(self, batch: List[List[str]], stage: str) -> list:
        """Launch ``batch`` through the sweep's launcher; a stop signal ends the sweep naming ``stage``."""
        from fastpipe.errors import EXIT_PREEMPTED
        from hydra_plugins.fastpipe_sweeps.gpus_launcher import GpusLauncher

        during = f"the {self.name} stopped during {stage}"
        if isinstance(self.launcher, GpusLauncher):  # its own stop line (stopping.py) names the batch
            self.launcher.during = during
        try:
            returns = self.launcher.launch(batch, initial_job_idx=self.job_idx)
        except SystemExit as exc:  # a job stopped by a signal (75) or Ctrl-C (130) ended the sweep
            if exc.code in (EXIT_PREEMPTED, 130) and not isinstance(self.launcher, GpusLauncher):  # it says so itself
                print(f"fastpipe: error: {during}; run the same command with sweep.resume=true to continue it "
                      f"({self.resume_note})", file=sys.stderr, flush=True)
            raise
        self.job_idx += len(batch)
        for r in returns:
            _ = r.return_value  # an exception the job raised ends the sweep, as in the basic sweeper
        return list(returns)

    resume_note = "the jobs that finished are kept, a stopped job continues from its checkpoint"

    def parallel(self) -> int:
        """Jobs the launcher runs at once (1 = one after another)."""
        return len(getattr(self.launcher, "slots", None) or [None])


def refuse(exc: Exception) -> None:
    """fastpipe's way with a setting that cannot work: one line, exit code 2, nothing started."""
    from hydra_plugins.fastpipe_sweeps.gpus_launcher import refuse as one_line

    one_line(exc)
