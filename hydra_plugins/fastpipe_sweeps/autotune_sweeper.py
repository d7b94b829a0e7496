"""``hydra/sweeper=autotune``: from the project's configuration (the command line's overrides, no lists) to its
fastest, one proven change at a time. The climb, its probes, candidates and ``autotune.json`` are
fastpipe.sweeps.autotune's; this class hands it the overrides, a way to launch a job through whatever
launcher the sweep uses, and the composed value of each key it may change. A stop signal ends the
sweep with exit code 75 and a line naming the trial and ``sweep.resume=true``, which continues it.
"""

import logging
from typing import Any, Dict, List, Optional

from omegaconf import OmegaConf

from hydra_plugins.fastpipe_sweeps.grid import GridSweeper, refuse

log = logging.getLogger(__name__)


class AutotuneSweeper(GridSweeper):
    name = "autotune"
    resume_note = "the trials that finished are kept, a stopped job continues from its checkpoint"

    def __init__(self, repeats: int = 3, max_wall_s: Optional[float] = None, max_trials: int = 20,
                 space: Optional[Dict[str, str]] = None, fixed: Optional[List[str]] = None,
                 race: Optional[Dict[str, Any]] = None, params: Optional[Dict[str, str]] = None) -> None:
        super().__init__(params)
        self.settings = dict(repeats=repeats, max_wall_s=max_wall_s, max_trials=max_trials,
                             space=dict(space) if space else None, fixed=list(fixed or ()), race=dict(race or {}))

    def sweep(self, arguments: List[str]) -> Any:
        from fastpipe.errors import ConfigError
        from fastpipe.record.overrides import override_key
        from fastpipe.sweeps.autotune.climb import AutotuneSettings, Climb, check_start

        try:
            settings = AutotuneSettings(**self.settings)
            combos, configs, sweep_dir = self.start(arguments)
            objective = check_start(combos, configs)
            settings.check(objective)
        except ConfigError as exc:
            refuse(exc)
        config = configs[0]
        machinery = [o for o in combos[0] if override_key(o).startswith("sweep.")]  # sweep.resume: how, not what
        project = [o for o in combos[0] if o not in machinery]
        climb = Climb(project, objective, settings, sweep_dir, self.launch_batch, self.values,
                      clock=str(OmegaConf.select(config, "report.target_clock", default="training")),
                      parity_tol=float(config.report.parity_tol), seed=int(config.seed), machinery=machinery,
                      noise_floor=float(config.report.noise_floor))
        log.info(f"Autotune from {' '.join(project) or 'the configuration as composed'}, by {objective}")
        try:
            climb.run()
        except ConfigError as exc:  # a candidate the space names that cannot be composed
            refuse(exc)
        return []

    def values(self, overrides: List[str], keys: List[str]) -> Dict[str, str]:
        """Each of ``keys``' value as ``overrides`` compose it (a group: its choice)."""
        config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        choices = config.hydra.runtime.choices
        found = {key: choices.get(key) if key in choices else OmegaConf.select(config, key) for key in keys}
        return {key: str(v).lower() if isinstance(v, bool) else str(v) for key, v in found.items()}  # as written
