"""Validation helpers shared by the schemas: each error names the key, the value and what would work."""
from __future__ import annotations

from typing import Any

from fastpipe.errors import ConfigError


def one_of(key: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not valid; use one of {', '.join(map(str, allowed))}")


def auto_or_int(key: str, value: Any, minimum: int = 0) -> None:
    if value == "auto":
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}={value!r} is not valid; use 'auto' or an integer >= {minimum}")


def auto_or_bool(key: str, value: Any) -> None:
    if value != "auto" and not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r}: use auto, true or false")
