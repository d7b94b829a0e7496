"""``hydra/sweeper=race``: race a grid's configurations over seeds until the winner stands out from the noise.

The grid is the basic sweeper's (command-line lists and ``hydra.sweeper.params``, so ``+sweep=``
presets work), each configuration numbered by its grid position. Round k trains every surviving
configuration with ``seed + k`` through whatever launcher the sweep uses (the basic one,
``hydra/launcher=gpus`` lanes in parallel, Slurm); after each round from ``min_rounds`` on, a rank
test drops every configuration significantly slower to the target than the leader
(fastpipe/sweeps/race.py, race_stats.py). ``race.json`` in the sweep folder is rewritten after
every round; a stop signal ends the sweep with exit code 75 and a line naming the round and
``sweep.resume=true``, which continues it.

It races by time to target only: a throughput does not depend on the seed (``report.repeats``
measures its spread), so ``report.objective=time_to_target`` is required; ``seed`` in the grid and
``report.repeats`` are refused, as the race owns both.
"""

import logging
from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import OmegaConf

from hydra_plugins.fastpipe_sweeps.grid import GridSweeper, refuse

log = logging.getLogger(__name__)


class RaceSweeper(GridSweeper):
    name = "race"
    resume_note = "the rounds that finished are kept, a stopped job continues from its checkpoint"

    def __init__(self, min_rounds: int = 5, max_rounds: int = 10, alpha: float = 0.05, cap: Optional[float] = 2.0,
                 max_wall_s: Optional[float] = None, params: Optional[Dict[str, str]] = None) -> None:
        super().__init__(params)
        self.settings = dict(min_rounds=min_rounds, max_rounds=max_rounds, alpha=alpha, cap=cap, max_wall_s=max_wall_s)

    def sweep(self, arguments: List[str]) -> Any:
        from fastpipe.errors import ConfigError
        from fastpipe.sweeps.race import RaceSettings, read
        from fastpipe.sweeps.race_run import new_record, run_race

        assert self.config is not None and self.hydra_context is not None
        try:
            settings = RaceSettings(**self.settings)
        except ConfigError as exc:
            refuse(exc)
        combos, configs, sweep_dir = self.start(arguments)
        refuse_unraceable(combos, configs)
        base = self.baseline(combos, configs)
        clock = str(OmegaConf.select(self.config, "report.target_clock", default="training"))
        record = new_record(combos, int(configs[0].seed), base, settings, clock, self.parallel())
        log.info(f"Race of {len(combos)} configurations over seeds from {record.seed_base}: tests from round "
                 f"{settings.min_rounds - 1} (the {settings.min_rounds}th seed), at most {settings.max_rounds} rounds")
        returns: List[list] = []
        run_race(lambda batch, stage: returns.append(self.launch_batch(batch, stage)), record, settings, sweep_dir,
                 clock, earlier=read(sweep_dir))
        return returns


def refuse_unraceable(combos: List[List[str]], configs) -> None:
    """One line for a grid a race cannot run: not ranked by time to target, seeds in the grid, repeats, one job."""
    from fastpipe.errors import ConfigError

    if any(str(c.report.objective) != "time_to_target" for c in configs):
        refuse(ConfigError("hydra/sweeper=race races by time to target: add report.objective=time_to_target (with "
                           "train.target); a throughput does not depend on the seed: measure its spread with "
                           "report.repeats=K and the basic sweeper"))
    if len({int(c.seed) for c in configs}) > 1:
        refuse(ConfigError("hydra/sweeper=race gives every job of round k the seed seed+k itself: drop seed from the "
                           "sweep's lists (seed=N, one value, sets the first round's seed)"))
    if any(int(c.report.repeats) != 1 for c in configs):
        refuse(ConfigError("report.repeats inside hydra/sweeper=race: the race decides how many seeds each job gets "
                           "(hydra.sweeper.min_rounds / max_rounds); drop report.repeats"))
    if len(combos) < 2:
        refuse(ConfigError(f"hydra/sweeper=race needs at least two configurations to race, the grid has "
                           f"{len(combos)}; give a list (e.g. compile=off,default) or run it once without -m"))
