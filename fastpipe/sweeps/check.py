"""Every job of a sweep checked before the first one starts.

Hydra refuses a value of the wrong type for the whole sweep before launching it; a value that only
fastpipe can judge (``train.batch_size=abc``, ``train.epochs=0``, a misspelt ``data.*`` key:
config/keys.py) would otherwise surface as a failed row after the jobs before it had run. So the
sweep's jobs are composed as its sweeper will compose them (command-line lists and a preset's
``hydra.sweeper.params``) and converted to fastpipe's settings, the ``_target_`` keys of the groups a
job's overrides touch checked against their callables (``+model.hiden=...``) and a swept
``train.target`` against the task's bounds; the first
job that fails is named, with its overrides, and nothing runs. Only each group's own values are judged: a combination that
cannot work (data=dali on a token dataset) or a dataset folder that is missing is still one failed
row, as the other jobs of the grid may be fine.
"""
from __future__ import annotations

from typing import List

from omegaconf import DictConfig, OmegaConf, open_dict

from fastpipe.errors import ConfigError

GRID_SWEEPERS = ("BasicSweeper", "HalvingSweeper", "RaceSweeper")  # sweepers whose jobs are the grid of the overrides


def sweep_jobs(config: DictConfig) -> List[List[str]]:
    """Each job's overrides, as a grid sweeper expands them; for another sweeper (Optuna...), whose
    trials choose their own values, one job of the fixed overrides."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    target = str(OmegaConf.select(config, "hydra.sweeper._target_", default="") or "")
    overrides = [str(o) for o in OmegaConf.to_container(config.hydra.overrides.task, resolve=False)]  # ${...} as typed
    parsed = OverridesParser.create().parse_overrides(overrides)
    if not target.endswith(GRID_SWEEPERS):
        return [[o.input_line for o in parsed if not o.is_sweep_override()]]
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    preset = [f"{key}={value}" for key, value in params.items()]
    grid = OverridesParser.create().parse_overrides(preset) + parsed
    return [list(job) for batch in BasicSweeper.split_arguments(grid, None) for job in batch]


def check_sweep(config: DictConfig) -> int:
    """Compose and convert every job of the sweep ``config`` starts; raises ConfigError naming the first
    job that fastpipe would refuse. Returns how many jobs were checked (those before a job Hydra cannot
    compose, such as a misspelt group choice, which Hydra's sweeper then reports itself)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException

    from fastpipe.config import job_choices, to_settings
    from fastpipe.config.objects import OBJECT_GROUPS
    from fastpipe.record.overrides import override_key

    loader = GlobalHydra.instance().config_loader()
    jobs = sweep_jobs(config)
    previous = HydraConfig.instance().cfg
    try:
        for number, job in enumerate(jobs):
            try:
                cfg = loader.load_sweep_config(config, job)
            except HydraException:  # a choice that does not exist: the sweeper says so in Hydra's own words
                return number
            choices = job_choices(cfg.hydra.runtime.choices, cfg)
            HydraConfig.instance().set_config(cfg)  # a job's ${hydra:...} resolves as in the job itself
            with open_dict(cfg):
                del cfg["hydra"]  # what the job's task function receives
            try:
                # Only what the job's overrides touch: importing a project's callables (and torch with them)
                # for the groups every job shares would cost each sweep's start seconds, and the first job
                # finds those anyway.
                keys = [override_key(o) for o in job]
                groups = [g for g in OBJECT_GROUPS if any(k == g or k.startswith(f"{g}.") for k in keys)]
                target = "task" in groups or any(k.startswith("train.target") for k in keys)
                to_settings(cfg, choices, check=False).check_own_values(groups, target)
            except ConfigError as exc:
                raise ConfigError(f"job {number} of the sweep ({' '.join(job) or 'no overrides'}): {exc}; nothing "
                                  "was run") from None
    finally:
        HydraConfig.instance().cfg = previous
    return len(jobs)
