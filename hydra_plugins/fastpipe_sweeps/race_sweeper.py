"""``hydra/sweeper=race``: race a grid's configurations over seeds until the winner stands out from the noise.

The grid is the basic sweeper's (command-line lists and ``hydra.sweeper.params``, so ``+sweep=``
presets work), each configuration numbered by its grid position. The race itself, its rounds, tests and
``race.json``, is fastpipe.sweeps.race's; this class hands it the grid and a way to launch a round through
whatever launcher the sweep uses. A stop signal ends the sweep with exit code 75 and a line naming the
round and ``sweep.resume=true``, which continues it.
"""

import logging
from typing import Any, Dict, List, Optional

from omegaconf import OmegaConf

from hydra_plugins.fastpipe_sweeps.grid import GridSweeper, refuse

log = logging.getLogger(__name__)


class RaceSweeper(GridSweeper):
    name = "race"
    resume_note = "the rounds that finished are kept, a stopped job continues from its checkpoint"

    def __init__(self, min_rounds: Optional[int] = None, max_rounds: int = 10, alpha: float = 0.05,
                 cap: Optional[float] = 2.0, cap_after: int = 3, max_wall_s: Optional[float] = None,
                 params: Optional[Dict[str, str]] = None) -> None:
        super().__init__(params)
        self.settings = dict(min_rounds=min_rounds, max_rounds=max_rounds, alpha=alpha, cap=cap, cap_after=cap_after,
                             max_wall_s=max_wall_s)

    def sweep(self, arguments: List[str]) -> Any:
        from fastpipe.errors import ConfigError
        from fastpipe.report.formats import ordinal
        from fastpipe.sweeps.race import shared_lr
        from fastpipe.sweeps.race.rounds import RaceSettings, check_grid, earlier_race
        from fastpipe.sweeps.race.run import new_record, run_race

        try:
            settings = RaceSettings(**self.settings)
            combos, configs, sweep_dir = self.start(arguments)
            check_grid(configs)
            settings.check(len(combos))
            clock = str(OmegaConf.select(self.config, "report.target_clock", default="training"))
            record = new_record(combos, int(configs[0].seed), self.baseline(combos, configs), settings, clock,
                                self.parallel())
            earlier = earlier_race(sweep_dir, record)
            sharing = shared_lr.sharing(configs)
        except ConfigError as exc:
            refuse(exc)
        first = settings.first_look(len(combos))
        log.info(f"Race of {len(combos)} configurations over seeds from {record.seed_base}: tests from round "
                 f"{first - 1} (the {ordinal(first)} seed), at most {settings.max_rounds} rounds")
        returns: List[list] = []
        try:
            run_race(lambda batch, stage: returns.append(self.launch_batch(batch, stage)), record, settings, sweep_dir,
                     clock, earlier=earlier, sharing=sharing)
        except ConfigError as exc:  # the shared range test failed: no round ran
            refuse(exc)
        return returns
