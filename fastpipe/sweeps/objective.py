"""The value a sweep job returns to a sweeper that optimises it (Optuna, Nevergrad, Ax, ...).

fastpipe's task function returns the job's metrics (a dict). Hydra's basic sweeper and fastpipe's
halving sweeper read the results from the job folders, so for them the dict stays; a sweeper that
optimises a value needs one float per job: ``report.objective`` says which.
"""
from __future__ import annotations

from typing import Any, Optional

from fastpipe.errors import ConfigError

from fastpipe.config.report import OBJECTIVES

# Sweepers that read fastpipe's results from the job folders: their jobs return the metrics dict.
READS_FOLDERS = ("hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                 "hydra_plugins.fastpipe_sweeps.halving_sweeper.HalvingSweeper",
                 "hydra_plugins.fastpipe_sweeps.race_sweeper.RaceSweeper",
                 "hydra_plugins.fastpipe_sweeps.autotune_sweeper.AutotuneSweeper")


def wants_objective(sweeper_target: Optional[str]) -> bool:
    """True when the sweep's sweeper optimises the value its jobs return."""
    return bool(sweeper_target) and str(sweeper_target) not in READS_FOLDERS


# A trial that missed the target scores MISSED_S plus its shortfall: after every trial that reached it
# (whatever their speeds differ by), so the optimiser's best trial is the report's winner, and a near
# miss before a far one (what the sampler learns from while nothing has reached the target).
MISSED_S = 1e9
NOT_EVALUATED = 1e3  # the shortfall of a miss with no whole-split evaluation at all


def shortfall(target: Optional[float], best: Optional[float], higher_is_better: bool = True) -> float:
    """How far a missed target's best held-out value stayed from it, as a share of the target's size
    (0 = at it); NOT_EVALUATED without a value."""
    if target is None or best is None:
        return NOT_EVALUATED
    gap = target - best if higher_is_better else best - target
    return max(gap, 0.0) / max(abs(target), 1e-12)


def objective_value(metrics: Any, objective: str, clock: str = "training") -> Optional[float]:
    """The job's objective: its throughput, its primary held-out metric, or its time to the target
    (on ``clock``; a job that did not reach it: ``MISSED_S`` plus its ``shortfall``); None when the
    job is not ok or did not measure it (the sweeper then records the trial as failed)."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"report.objective={objective!r}: choose one of {', '.join(OBJECTIVES)}")
    if not isinstance(metrics, dict) or metrics.get("status") != "ok":
        return None
    if objective == "throughput":
        value = metrics.get("throughput")
    elif objective == "time_to_target":
        target = metrics.get("target") or {}
        value = target.get("seconds_end_to_end" if clock == "end_to_end" else "seconds")
        if value is not None and not target.get("reached"):
            value = MISSED_S + shortfall(target.get("value"), target.get("best_value"),
                                         target.get("higher_is_better", True))
    else:
        value = (metrics.get("primary_metric") or {}).get("value")
    return None if value is None else float(value)


def higher_is_better(metrics: Any, objective: str) -> Optional[bool]:
    """The objective's direction: throughput is higher-is-better; a primary metric says its own."""
    if objective == "throughput":
        return True
    if objective == "time_to_target":
        return False
    if isinstance(metrics, dict):
        return (metrics.get("primary_metric") or {}).get("higher_is_better")
    return None


def direction_name(direction: Any) -> str:
    """``minimize`` / ``maximize`` from a sweeper's direction setting (a string or an enum)."""
    if isinstance(direction, (list, tuple)):
        return ",".join(direction_name(d) for d in direction)
    return str(getattr(direction, "name", direction)).lower()


def job_return_value(metrics: Any, config) -> Any:
    """What a sweep job hands back to its sweeper: the metrics dict, or for a sweeper that optimises
    a value (``config.hydra.sweeper._target_`` not one of READS_FOLDERS) the ``report.objective``."""
    from omegaconf import OmegaConf

    if not wants_objective(OmegaConf.select(config, "hydra.sweeper._target_", default=None)):
        return metrics
    return objective_value(metrics, str(OmegaConf.select(config, "report.objective", default="throughput")),
                           str(OmegaConf.select(config, "report.target_clock", default="training")))
