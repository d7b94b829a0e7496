"""Successive halving on measured throughput: the plan of ``hydra/sweeper=halving`` and its record.

Every combination of the grid except the baseline first trains a short *probe*
(``train.max_steps`` = its ``measure.warmup_steps`` + ``probe_steps``: compilation and warm-up are
timed apart, the steady windows after them give the throughput). Each round keeps the fastest
``keep`` share of the probes (never fewer than ``finalists``, always dropping at least one while more
than ``finalists`` are left); the next round probes the survivors ``1/keep`` times longer, so every
round costs about the same and the close calls get the longer measurements. When ``finalists`` or
fewer are left, they and the baseline train at full length, with held-out evaluation, and the
report picks the winner among them as for a grid (fastest ok job whose primary metric held).

A probe that fails, falls back to eager or measures no steady state is dropped at once (its own
status in the report). Folders: ``<sweep>/probe-R/N/`` for round R's probe of grid combination N,
``<sweep>/N/`` for full runs, so a full run sits where the grid sweep would put it.

``halving.json`` in the sweep folder records the plan, every round (who ran, who was kept, the
throughputs, wall-clock times) and the full runs; the report reads it.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from fastpipe.errors import ConfigError
from fastpipe.record.results import write_json_atomic

FILE = "halving.json"
VERSION = 1
PROBE_PREFIX = "probe-"

Launch = Callable[[List[List[str]], str], object]  # (batch of jobs' overrides, what the batch is) -> anything


@dataclass
class Grid:
    """What a halving sweep runs over: the grid's combinations (each a list of overrides) and their composed
    configs, the baseline's number, the sweep folder, the overrides every job adds, jobs run at once."""

    combos: List[List[str]]
    configs: list
    baseline: int
    folder: Path
    extra: List[str] = field(default_factory=list)
    parallel: int = 1


def probe_folder(round_no: int) -> str:
    """The folder of round ``round_no``'s probes, inside the sweep folder."""
    return f"{PROBE_PREFIX}{round_no}"


@dataclass
class HalvingSettings:
    probe_steps: int = 30  # steady-state steps of a round-1 probe (after measure.warmup_steps)
    keep: float = 0.5  # share of the probes kept each round
    finalists: int = 2  # combinations (besides the baseline) trained at full length

    def __post_init__(self) -> None:
        if self.probe_steps < 1:
            raise ConfigError(f"hydra.sweeper.probe_steps={self.probe_steps} must be >= 1 (steady-state steps "
                              "of a probe, after the warm-up)")
        if not 0.0 < self.keep < 1.0:
            raise ConfigError(f"hydra.sweeper.keep={self.keep} must be between 0 and 1 (the share of the probes "
                              "kept each round, e.g. 0.5)")
        if self.finalists < 1:
            raise ConfigError(f"hydra.sweeper.finalists={self.finalists} must be >= 1 (combinations trained at "
                              "full length besides the baseline)")

    def probe_steps_in(self, round_no: int) -> int:
        """Steady-state steps of a probe in round ``round_no`` (1-based): ``probe_steps`` x (1/keep)^(R-1)."""
        return int(round(self.probe_steps * (1.0 / self.keep) ** (round_no - 1)))


def usable(metrics: Optional[dict]) -> bool:
    """A probe that can be ranked: ok, compiled as asked (no eager fall-back), a steady-state throughput."""
    return (isinstance(metrics, dict) and metrics.get("status") == "ok" and not metrics.get("compile_fallback")
            and metrics.get("throughput") is not None)


@dataclass
class RoundOutcome:
    kept: List[int]
    dropped: List[int]  # measured, slower than the kept ones: status pruned
    failed: List[int]  # not rankable (failed, fallback, unmeasured, missing): their own status
    cutoff: Optional[float]  # the slowest kept throughput


def select(probes: Dict[int, Optional[dict]], keep: float, finalists: int) -> RoundOutcome:
    """Rank one round's probes by throughput and keep the fastest share."""
    rates = {n: float(m["throughput"]) for n, m in probes.items() if usable(m)}
    failed = sorted(n for n in probes if n not in rates)
    order = sorted(rates, key=lambda n: (-rates[n], n))
    n_keep = max(finalists, math.ceil(len(order) * keep))
    if len(order) > finalists:
        n_keep = min(n_keep, len(order) - 1)  # a round always drops someone while it can
    n_keep = min(n_keep, len(order))
    kept, dropped = order[:n_keep], order[n_keep:]
    return RoundOutcome(kept, dropped, failed, rates[kept[-1]] if kept else None)


@dataclass
class HalvingRecord:
    """The content of ``halving.json``."""

    settings: Dict[str, object]
    combos: List[List[str]]  # grid combination N's overrides, in the grid's order
    baseline: Optional[int]
    probe_keys: List[str] = field(default_factory=list)  # overrides a probe adds to its combination's
    rounds: List[dict] = field(default_factory=list)
    finals: List[int] = field(default_factory=list)
    finals_started: Optional[float] = None
    finals_ended: Optional[float] = None
    started: float = field(default_factory=time.time)
    ended: Optional[float] = None
    parallel: int = 1  # jobs the launcher ran at once (1 = one after another)
    version: int = VERSION

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in ("version", "settings", "combos", "baseline", "probe_keys", "rounds",
                                              "finals", "finals_started", "finals_ended", "started", "ended",
                                              "parallel")}

    @classmethod
    def from_json(cls, data: dict) -> "HalvingRecord":
        known = {k: data[k] for k in ("settings", "combos", "baseline", "probe_keys", "rounds", "finals",
                                      "finals_started", "finals_ended", "started", "ended", "parallel",
                                      "version") if k in data}
        return cls(**known)

    def write(self, sweep_dir: Path) -> None:
        write_json_atomic(Path(sweep_dir) / FILE, self.to_json())

    def last_round(self, num: int) -> Optional[dict]:
        """The last round combination ``num`` was probed in, or None."""
        rounds = [r for r in self.rounds if num in r.get("jobs", [])]
        return rounds[-1] if rounds else None


def read(sweep_dir: Path) -> Optional[HalvingRecord]:
    """The sweep folder's halving record, or None (a grid or Optuna sweep)."""
    path = Path(sweep_dir) / FILE
    try:
        return HalvingRecord.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
