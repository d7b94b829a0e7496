"""``train.batch_size=auto``: the batch size found by trying the real training step.

Each candidate builds the run's stages afresh through the one stage builder (graph.build_probe:
model, placement, precision, compile, EMA, optimizer) and runs a few of the training step itself
(train/step.py: accumulation, clipping, the EMA's update; compilation included, Dynamo reset between
candidates so each compiles for its own shape) on a real batch. The search starts
at ``train.batch_size_start`` (256 on a GPU, 32 on a CPU), doubles while the step fits (halves while it
does not) to bracket the answer, then bisects between the last size that fitted and the first that
did not, on the grid of ``train.batch_size_round`` (multiples of 8, or powers of two: no bisection).
On a GPU a size does not fit when the step runs out of memory (caught, the cache emptied); on a CPU,
where running out of memory kills the process instead of raising, the search stops at the cap
(``train.batch_size_max``). ``train.batch_size_goal=memory`` takes the largest that fits;
``throughput`` the one with the best steady-state samples/s among those tried that fit. Under DDP
every rank searches on its own GPU and the ranks agree (a size fits only if it fits on all of them).
The probes change nothing of the run: its model is built after them, from the same seed.

Bounded and said as it goes (rank 0 prints each probe: size, fits, samples/s, peak memory, seconds):
the search stops probing once ``train.batch_size_search_s`` is spent (it keeps the best size found so
far; halving until one size fits is never cut short). On a GPU a new shape costs more than its steps:
cuDNN autotunes every convolution for it, so the memory goal's probes run without autotuning (the run
autotunes its one shape); Dynamo is reset between probes only when the run compiles.
"""
from __future__ import annotations

import contextlib
import gc
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional

import torch

from fastpipe.config import Config
from fastpipe.config.registry import choice, lower_precision
from fastpipe.errors import ConfigError, FastpipeError, memory_fixes
from fastpipe.measure.steps import synchronize
from fastpipe.runtime import Runtime, gather_objects
from fastpipe.train import graph
from fastpipe.train.first_batch import check_first_batches
from fastpipe.train.step import train_step

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

CPU_START, GPU_START = 32, 256  # train.batch_size_start=null
CPU_CAP, GPU_CAP = 128, 4096  # train.batch_size_max=null
# Steps per candidate. Memory: the second step holds weights, optimizer state, activations and gradients
# at once (the first creates the state after its activations are freed); a third covers CUDA graphs,
# recorded on a later call; the second and third are timed for the printed samples/s. Throughput:
# compile + first optimizer state, then timed steps.
MEMORY_STEPS = 3
WARMUP_STEPS, TIMED_STEPS = 2, 3


def steps_for(goal: str) -> tuple:
    """(untimed steps, timed steps) of one candidate for ``train.batch_size_goal``."""
    return (1, MEMORY_STEPS - 1) if goal == "memory" else (WARMUP_STEPS, TIMED_STEPS)


def is_out_of_memory(exc: BaseException) -> bool:
    """A CUDA out-of-memory error, also when a compiler stage re-raised it as its own."""
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def cap_for(cfg, device: torch.device) -> int:
    return cfg.batch_size_max or (GPU_CAP if device.type == "cuda" else CPU_CAP)


def find_batch_size(settings: Config, runtime: Runtime, splits=None) -> BatchSearch:
    """Search per ``settings.train`` (``batch_size=auto``) on ``runtime``'s device, over ``splits`` (the
    run's built dataset; built here when None); every rank calls it."""
    from fastpipe.runtime import seed_everything

    launcher = choice("launcher", settings.launcher.name)
    if launcher.shards:
        raise ConfigError(f"train.batch_size=auto with launcher={launcher.name}: the search tries whole-model steps "
                          "on one device, which a sharded model does not fit; set train.batch_size=N")
    start_time = time.perf_counter()
    device, cfg = runtime.device, settings.train
    splits = splits if splits is not None else graph.build_splits(settings, runtime)
    cap = cap_for(cfg, device)
    limit = _dataset_limit(splits, runtime.dist.world_size)
    bound = min(cap, limit) if limit else cap
    start = start_for(cfg, device, on_grid(bound, cfg.batch_size_round))
    spent = Budget(cfg.batch_size_search_s, runtime.dist)
    probes = search(_prober(settings, runtime, splits), runtime.dist, bound, start, cfg.batch_size_round, spent)
    if limit is not None and limit < cap and all(p.fits for p in probes):
        probes[-1].why = probes[-1].why or f"the dataset's {limit} samples per process bound the search"
    if runtime.dist.world_size > 1:  # a size fits only where it fits on every rank; rates add up
        probes = agree(runtime.dist.gather(probes))
    fitting = [p for p in probes if p.fits]
    if not fitting:
        fixes = [f for f in memory_fixes("auto", lower_precision(settings.precision.name),
                                         settings.model.activation_checkpointing,
                                         launcher.shards) if "batch_size" not in f]
        raise FastpipeError(f"train.batch_size=auto: not even a batch of 1 fits on {device} "
                            f"({probes[-1].why}); use a smaller model; or {'; or '.join(fixes)}")
    if cfg.batch_size_goal == "throughput" and all(p.samples_per_s for p in fitting):
        chosen = max(fitting, key=lambda p: p.samples_per_s).batch_size
    else:
        chosen = max(p.batch_size for p in fitting)
    seed_everything(settings.seed + runtime.dist.rank)  # the run starts from the seed, as without a search
    return BatchSearch(cfg.batch_size_goal, cap, chosen, sorted(probes, key=lambda p: p.batch_size),
                       time.perf_counter() - start_time, start, cfg.batch_size_round, cfg.batch_size_search_s,
                       spent.cut_short)


def _prober(settings: Config, runtime: Runtime, splits) -> Callable[[int], Probe]:
    """``probe(size)``: the run's step tried at ``size`` on this process, said on rank 0 as it ends. The
    first probe checks a first batch of each split (train/first_batch.py); the memory goal's run without
    cuDNN autotuning (one shape each: autotuning it costs more than its steps)."""
    from fastpipe.runtime import autotuning_off

    cfg, tried = settings.train, []
    timed = steps_for(cfg.batch_size_goal)[1]
    tuning = autotuning_off if cfg.batch_size_goal == "memory" else contextlib.nullcontext

    def probe(size: int) -> Probe:
        check = not tried
        tried.append(size)
        with tuning():
            result = _probe(size, runtime.device, size * cfg.grad_accum * timed,
                            lambda: _run_steps(settings, runtime, splits, size, check=check),
                            settings.compile.name != "off")
        if runtime.dist.is_main:
            print(f"fastpipe: train.batch_size=auto: {result.describe()}", file=sys.stderr, flush=True)
        return result

    return probe


def _dataset_limit(splits, world_size: int) -> Optional[int]:
    """The largest batch each process can fill from the training split (None: a stream or synthetic)."""
    if splits.is_synthetic or not hasattr(splits.train, "__len__"):
        return None
    return max(1, len(splits.train) // world_size)


def start_for(cfg, device: torch.device, top: int) -> int:
    """The first candidate: ``train.batch_size_start`` (or the device's default) on the grid, at most ``top``."""
    start = cfg.batch_size_start or (GPU_START if device.type == "cuda" else CPU_START)
    return on_grid(min(start, top), cfg.batch_size_round)


def _probe(size: int, device: torch.device, samples_timed: int, run: Callable[[], float],
           compiled: bool = False) -> Probe:
    """``run()`` (the training step for ``size``, built and run: the seconds of its timed steps, which
    held ``samples_timed`` samples), with the device's memory measured around it; fits=False when it
    runs out of GPU memory. ``compiled``: Dynamo is reset first, so that the size compiles for its own
    shape, as the run will (importing Dynamo costs seconds a run that does not compile never pays)."""
    begun = time.perf_counter()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    if compiled:
        torch._dynamo.reset()
    seconds = None
    try:
        seconds = run()
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
    gc.collect()  # the failed step's tensors (held by its traceback until now) go back to the cache
    peak = torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None
    if device.type == "cuda":
        torch.cuda.empty_cache()
    took = round(time.perf_counter() - begun, 2)
    if seconds is None:
        return Probe(size, False, why="out of memory", seconds=took)
    return Probe(size, True, samples_timed / seconds if samples_timed and seconds > 0 else None,
                 None if peak is None else round(peak, 3), seconds=took)


def _run_steps(settings: Config, runtime: Runtime, splits, size: int, check: bool = False) -> float:
    """The run's graph built for batch ``size`` (graph.build_probe), then ``steps_for(goal)`` of the
    training step itself (accumulation, clipping, EMA) on one batch; returns the timed steps' seconds.
    ``check``: first, a first batch of each split through the project's parts (train/first_batch.py)."""
    g = graph.build_probe(settings, runtime, splits, size)
    if check:
        check_first_batches(g, settings)
    g.train_loader.set_epoch(0)
    batch = next(iter(g.train_loader))
    untimed, timed = steps_for(settings.train.batch_size_goal)
    for _ in range(untimed):
        train_step(g, settings.train, lambda: batch)
    synchronize(runtime.device)
    start = time.perf_counter()
    for _ in range(timed):
        train_step(g, settings.train, lambda: batch)
    synchronize(runtime.device)
    return time.perf_counter() - start
