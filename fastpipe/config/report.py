"""``report.*`` and ``sweep.*``: how a sweep's report compares its jobs (docs/sweeps.md)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from fastpipe.errors import ConfigError


@dataclass
class ReportConfig:
    # The baseline job: null = the job with the first listed value of every swept key; or overrides
    # naming the job, quoted for Hydra: 'report.baseline="precision=amp,compile=off"'; or a job number.
    baseline: Optional[str] = None
    # How much worse than the baseline's the primary held-out metric may be, absolute, in the metric's
    # own units and direction: 0.01 = one point of accuracy (0..1), or 0.01 nats of an LM's loss.
    parity_tol: float = 0.01
    repeats: int = 1  # measure each combination this many times (repeat-K/ folders); median and spread
    # What the sweep optimises: the report's winner is the fastest job (throughput) or the one with the
    # best primary held-out metric in its direction (primary_metric); a sweeper that optimises a value
    # (hydra/sweeper=optuna) gets this number as each job's return.
    objective: str = "throughput"

    def __post_init__(self) -> None:
        if not self.parity_tol >= 0.0:
            raise ConfigError(f"report.parity_tol={self.parity_tol} must be >= 0 (how much worse than the "
                              "baseline's the primary metric may be, in its own units)")
        if self.repeats < 1:
            raise ConfigError(f"report.repeats={self.repeats} must be >= 1")
        if self.objective not in ("throughput", "primary_metric"):
            raise ConfigError(f"report.objective={self.objective!r} is not valid; use throughput (the fastest job "
                              "wins) or primary_metric (the best held-out primary metric wins)")


@dataclass
class SweepConfig:
    resume: bool = False  # re-running into the same hydra.sweep.dir skips jobs that finished ok
