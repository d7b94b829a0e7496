"""The search over batch sizes, apart from what a probe runs (train/batch_size.py): bracket, then bisect
on the grid of ``train.batch_size_round``, within ``train.batch_size_search_s``; under DDP the ranks'
verdicts agreed; what it found (``BatchSearch``: metrics.json's ``batch_size_search`` and graph.txt's line)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from fastpipe.runtime import gather_objects

GRID = 8  # train.batch_size_round=8: multiples of 8 (and 1, 2, 4 below it)


def on_grid(size: int, rounding) -> int:
    """The largest candidate at or below ``size`` (>= 1): a multiple of 8 from 8 up (rounding=8), else a
    power of two."""
    if rounding == GRID and size >= GRID:
        return size - size % GRID
    return 1 << (max(1, size).bit_length() - 1)


@dataclass
class Probe:
    """One batch size tried: whether it fits, its rate (the throughput goal) and peak memory (a GPU)."""

    batch_size: int
    fits: bool
    samples_per_s: Optional[float] = None
    peak_mem_gb: Optional[float] = None
    why: str = ""  # why it does not fit (out of memory, past the dataset)
    seconds: Optional[float] = None  # the probe's build and steps

    def describe(self) -> str:
        """``512 fits: 4,321 samples/s, peak 23.4 GB (3.2 s)``, or why it does not fit."""
        took = f" ({self.seconds:.1f} s)" if self.seconds is not None else ""
        if not self.fits:
            return f"{self.batch_size} does not fit ({self.why or 'out of memory'}){took}"
        rate = f"{self.samples_per_s:,.0f} samples/s" if self.samples_per_s else "samples/s n/a"
        peak = f", peak {self.peak_mem_gb:.1f} GB" if self.peak_mem_gb is not None else ""
        return f"{self.batch_size} fits: {rate}{peak}{took}"


@dataclass
class BatchSearch:
    """What the search found; ``record()`` is metrics.json's ``batch_size_search``."""

    goal: str
    cap: int
    chosen: int
    probes: List[Probe] = field(default_factory=list)
    seconds: float = 0.0

    start: int = 0
    rounding: object = GRID
    budget_s: Optional[float] = None  # train.batch_size_search_s
    cut_short: bool = False  # the budget ended the search before its bracket closed

    def describe(self) -> str:
        """graph.txt's note on the batch size: the goal, the probes, the grid, the cap, the time."""
        tried = ", ".join(f"{p.batch_size}{'' if p.fits else ' x'}" for p in self.probes)
        what = "largest that fits" if self.goal == "memory" else "best samples/s of those that fit"
        grid = "multiples of 8" if self.rounding == GRID else "powers of two"
        capped = f"; capped at train.batch_size_max={self.cap}" if max(p.batch_size for p in self.probes) == \
            on_grid(self.cap, self.rounding) and all(p.fits for p in self.probes) else ""
        cut = f"; stopped by train.batch_size_search_s={self.budget_s:g}" if self.cut_short else ""
        return (f"(auto: {what}; {len(self.probes)} probes from {self.start} in {grid}: {tried}{capped}{cut}; "
                f"{self.seconds:.0f} s)")

    def record(self) -> dict:
        return {"goal": self.goal, "cap": self.cap, "chosen": self.chosen, "seconds": round(self.seconds, 1),
                "start": self.start, "round": self.rounding, "probe_count": len(self.probes),
                "budget_s": self.budget_s, "cut_short": self.cut_short, "probes": [vars(p) for p in self.probes]}


class Budget:
    """``train.batch_size_search_s``: called between probes, true once the search has spent it (on any
    rank: the ranks agree, so that every one stops at the same probe)."""

    def __init__(self, seconds: Optional[float], dist) -> None:
        self.deadline = None if seconds is None else time.perf_counter() + seconds
        self.dist, self.cut_short = dist, False

    def __call__(self) -> bool:
        late = self.deadline is not None and time.perf_counter() > self.deadline
        if self.dist.world_size > 1:
            late = any(self.dist.gather(late))
        self.cut_short = self.cut_short or late
        return late


def search(probe: Callable[[int], Probe], dist, cap: int, start: int, rounding,
           spent: Callable[[], bool] = lambda: False) -> List[Probe]:
    """Bracket, then bisect: from ``start``, double while a size fits (up to ``cap``) or halve while it
    does not (down to 1); then bisect on the grid of ``rounding`` between the last size that fitted and the
    first that did not. With a limit that grows with the batch, the answer is the largest size on the grid
    that fits. ``probe(size)`` tries one size on this process; ``dist``: the processes that search together;
    ``spent()``: the time budget is spent, so no more doubling or bisecting (halving goes on until one fits)."""
    top = on_grid(cap, rounding)
    probes: List[Probe] = []

    def fits(size: int) -> bool:
        probes.append(on_every_rank(probe(size), dist))
        return probes[-1].fits

    size = on_grid(min(start, top), rounding)
    lo, hi = (size, None) if fits(size) else (None, size)
    while lo is None and hi > 1:  # halve until one fits
        size = on_grid(hi // 2, rounding)
        lo, hi = (size, hi) if fits(size) else (None, size)
    if lo is None:
        return probes  # not even 1 fits
    while hi is None and lo < top and not spent():  # double until one does not fit, or the cap
        size = min(on_grid(2 * lo, rounding), top)
        lo, hi = (size, None) if fits(size) else (lo, size)
    while hi is not None and not spent():  # bisect between the last fit and the first failure
        size = on_grid((lo + hi) // 2, rounding)
        if size <= lo:
            break
        lo, hi = (size, hi) if fits(size) else (lo, size)
    return probes


def on_every_rank(probe: Probe, dist) -> Probe:
    """Under DDP a size fits only if it fits on every rank, so that every rank searches the same sizes
    (one rank searching down while another searches up would share no size). A collective: every
    rank calls it for every probe."""
    if dist.world_size > 1:
        everywhere = all(gather_objects(probe.fits, dist.world_size))
        if probe.fits and not everywhere:
            probe.fits, probe.why = False, probe.why or "did not fit on every rank"
    return probe


def agree(per_rank: List[List[Probe]]) -> List[Probe]:
    """One list of probes from every rank's (the same sizes were tried while all fitted)."""
    sizes = sorted({p.batch_size for probes in per_rank for p in probes})
    agreed = []
    for size in sizes:
        mine = [next((p for p in probes if p.batch_size == size), None) for probes in per_rank]
        if any(p is None for p in mine):
            continue  # one rank stopped earlier: that size did not fit there
        fits = all(p.fits for p in mine)
        rates = [p.samples_per_s for p in mine]
        peaks = [p.peak_mem_gb for p in mine if p.peak_mem_gb is not None]
        agreed.append(Probe(size, fits, sum(rates) if fits and None not in rates else None,
                            max(peaks) if peaks else None, next((p.why for p in mine if p.why), ""),
                            max((p.seconds for p in mine if p.seconds is not None), default=None)))
    return agreed
