"""``report.*`` and ``sweep.*``: how a sweep's report compares its jobs (docs/sweeps.md)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from fastpipe.errors import ConfigError

OBJECTIVES = ("throughput", "primary_metric", "time_to_target")
AGGREGATES = ("median", "olympic")
OBJECTIVE_CHOICES = ("report.objective={value} is not valid; use throughput (the fastest job wins), primary_metric "
                     "(the best held-out primary metric wins) or time_to_target (the first to reach train.target wins)")


@dataclass
class ReportConfig:
    # The baseline job: null = the job with the first listed value of every swept key; or overrides
    # naming the job, quoted for Hydra: 'report.baseline="precision=amp,compile=off"'; or a job number.
    baseline: Optional[str] = None
    # How much worse than the baseline's the primary held-out metric may be, absolute, in the metric's
    # own units and direction: 0.01 = one point of accuracy (0..1), or 0.01 nats of an LM's loss.
    parity_tol: float = 0.01
    repeats: int = 1  # measure each combination this many times (repeat-K/ folders); median and spread
    # What the sweep optimises: the fastest job wins (throughput), the best primary held-out metric in
    # its direction (primary_metric), or the first to reach train.target (time_to_target,
    # docs/time-to-target.md). A sweeper that optimises a value (hydra/sweeper=optuna) gets this number
    # as each job's return.
    objective: str = "throughput"
    # time_to_target: which clock ranks the jobs: training (from the first training step: compilation,
    # evaluations and checkpoints included) or end_to_end (from the job's start: data, model build too).
    target_clock: str = "training"
    # Throughput with report.repeats: a job whose repeats spread (max - min) / median more than this is
    # flagged unstable and never named the winner (its samples/s is not measured well enough to rank).
    max_spread: float = 0.10
    # Throughput with one run per job: the run-to-run spread (a standard deviation, relative) added to each
    # run's own steady-state windows; the leader is named only when its margin over the next job exceeds
    # twice their combined uncertainty. 0.04: measured on the 2-core CPU VM (docs/sweeps.md#how-sure-the-ranking-is).
    noise_floor: float = 0.04
    # time_to_target over several runs of a job (report.repeats, a race's rounds): median, or olympic
    # (MLPerf's: the fastest and slowest dropped, the rest averaged; a miss counts as the slowest, and
    # a job that missed more than once has not reached the target).
    aggregate: str = "median"

    def __post_init__(self) -> None:
        if not self.parity_tol >= 0.0:
            raise ConfigError(f"report.parity_tol={self.parity_tol} must be >= 0 (how much worse than the "
                              "baseline's the primary metric may be, in its own units)")
        if self.repeats < 1:
            raise ConfigError(f"report.repeats={self.repeats} must be >= 1")
        if self.objective not in OBJECTIVES:
            raise ConfigError(OBJECTIVE_CHOICES.format(value=repr(self.objective)))
        if not self.max_spread > 0.0:
            raise ConfigError(f"report.max_spread={self.max_spread} must be > 0 (the largest (max - min) / median of a "
                              "job's repeated throughputs that still ranks, e.g. 0.10)")
        if not 0.0 <= self.noise_floor < 1.0:
            raise ConfigError(f"report.noise_floor={self.noise_floor} must be between 0 and 1 (the run-to-run "
                              "standard deviation of a throughput, relative: 0.04 = 4 %)")
        if self.aggregate not in AGGREGATES:
            raise ConfigError(f"report.aggregate={self.aggregate!r} is not valid; use median or olympic (MLPerf's: the "
                              "fastest and slowest run dropped, the rest averaged)")
        if self.target_clock not in ("training", "end_to_end"):
            raise ConfigError(f"report.target_clock={self.target_clock!r} is not valid; use training (from the first "
                              "training step) or end_to_end (from the job's start)")


@dataclass
class SweepConfig:
    resume: bool = False  # re-running into the same hydra.sweep.dir skips jobs that finished ok
