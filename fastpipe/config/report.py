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
    parity_tol: float = 0.01  # accuracy may fall this much (absolute, 0..1) below the baseline's
    repeats: int = 1  # measure each combination this many times (repeat-K/ folders); median and spread

    def __post_init__(self) -> None:
        if not 0.0 <= self.parity_tol <= 1.0:
            raise ConfigError(f"report.parity_tol={self.parity_tol} must lie in [0, 1] (accuracy is 0..1)")
        if self.repeats < 1:
            raise ConfigError(f"report.repeats={self.repeats} must be >= 1")


@dataclass
class SweepConfig:
    resume: bool = False  # re-running into the same hydra.sweep.dir skips jobs that finished ok
