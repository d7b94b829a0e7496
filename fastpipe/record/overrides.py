"""Reading Hydra override strings: which key an override sets, and which overrides identify a job."""
from __future__ import annotations

from typing import Iterable, List


def override_key(override: str) -> str:
    """The key (or group) an override sets: ``'+train.lr=0.1'`` -> ``'train.lr'``."""
    return override.split("=", 1)[0].lstrip("+~")


def quote(value: str) -> str:
    """``value`` as a quoted Hydra override value (a path with commas, ``=`` or brackets stays one value)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def is_sweep_setting(override: str) -> bool:
    """True for overrides that steer the sweep or its report rather than what a job measures."""
    key = override_key(override)
    return key == "sweep" or key.startswith("sweep.") or key in ("report.baseline", "report.parity_tol")


def measured_overrides(overrides: Iterable[str]) -> List[str]:
    """A job's overrides without the sweep/report settings: what identifies the measurement."""
    return [o for o in overrides or [] if not is_sweep_setting(o)]
