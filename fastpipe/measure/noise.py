"""How two measured runs compare beyond their noise, for the report's verdicts and autotune's alike: a held-out
metric's parity with the baseline's, and one run's throughput uncertainty (its steady-state windows and a
run-to-run floor)."""
from __future__ import annotations

import math
from typing import Optional


def parity(value: Optional[float], base_value: Optional[float], tol: float, higher_is_better: bool = True) -> str:
    """``ok`` when the primary metric held within ``tol`` of the baseline's (in its direction),
    ``FAIL`` if not, ``n/a`` if either is unknown."""
    if value is None or base_value is None:
        return "n/a"
    worse_by = base_value - value if higher_is_better else value - base_value
    return "ok" if worse_by <= tol + 1e-12 else "FAIL"


# The expected range of n draws from a normal distribution, in standard deviations (d2, the control-chart
# constant); between the tabled counts it is interpolated on log(n).
RANGE_SD = ((2, 1.128), (3, 1.693), (4, 2.059), (5, 2.326), (6, 2.534), (8, 2.847), (10, 3.078), (15, 3.472),
            (20, 3.735), (30, 4.086), (50, 4.498), (100, 5.015), (200, 5.492), (1000, 6.483))


def range_in_sd(n: int) -> float:
    """d2 of ``n`` draws (``RANGE_SD``)."""
    if n <= RANGE_SD[0][0]:
        return RANGE_SD[0][1]
    for (n0, d0), (n1, d1) in zip(RANGE_SD, RANGE_SD[1:]):
        if n <= n1:
            return d0 + (d1 - d0) * math.log(n / n0) / math.log(n1 / n0)
    return RANGE_SD[-1][1]


def uncertainty(r: dict, noise_floor: float) -> float:
    """A one-run throughput's relative standard error: its steady-state windows' (their step times' range
    over the median, as standard deviations by ``range_in_sd``, over the square root of their count) and
    the run-to-run ``noise_floor``, added in quadrature."""
    median, extent, windows = r.get("step_time_median_ms"), r.get("step_time_spread_ms"), r.get("step_windows")
    own = extent / median / range_in_sd(windows) / math.sqrt(windows) if median and extent and windows and \
        windows > 1 else 0.0
    return math.sqrt(own ** 2 + noise_floor ** 2)
