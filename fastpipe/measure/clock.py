"""The run's clocks (docs/time-to-target.md): the training clock and where a launch's time went.

- The **training clock** runs from the first training step (the first batch fetch) on, with warm-up,
  compilation, every evaluation and checkpoint in between. A resumed run continues it: the seconds of
  earlier launches are its offset, and a restart's start-up (imports, data, model build) is not on it.
- The **end-to-end clock** adds what came before the first step of the first launch: from the job's
  start (``Config.started_at``) through imports, dataset generation or packing and the model build.
- ``breakdown()``: this launch's wall time split into setup (outside the training clock: before the
  first step and after the last), compile (Dynamo's and Inductor's own compile time while the
  training clock ran), eval, checkpoint and train (the rest of the training clock). The parts are
  exclusive (a ``best.pt`` written during an evaluation is checkpoint time, not eval time).
- ``compile_cache()``: Inductor's FX-graph cache and AOTAutograd's cache hits and misses
  (``torch._dynamo.utils.counters``), so a reader knows which jobs paid a cold compile.

The clocks are host clocks read where the loop already syncs (window edges, evaluations, saves), so
they cost no device synchronisation of their own.
"""
from __future__ import annotations

import contextlib
import sys
import time
from typing import Dict, Iterator, List, Optional

PARTS = ("setup", "compile", "train", "eval", "checkpoint")


def compile_seconds() -> float:
    """Seconds torch.compile has spent in this process (Dynamo's frame and backward compiles, Inductor
    and autotuning inside them): ``torch._dynamo.utils.calculate_time_spent()['total_wall_time']``."""
    utils = sys.modules.get("torch._dynamo.utils")  # not imported: nothing was compiled (and no import cost)
    try:
        return float(utils.calculate_time_spent().get("total_wall_time", 0.0)) if utils else 0.0
    except Exception:  # an older torch without the aggregate: compile time stays inside train
        return 0.0


CACHE_COUNTERS = {"fx_graph": ("inductor", "fxgraph_cache"), "aot_autograd": ("aot_autograd", "autograd_cache")}


def cache_counts() -> Dict[str, Dict[str, int]]:
    """This process's cache lookups so far: ``{fx_graph: {hit, miss, bypass}, aot_autograd: {...}}``."""
    utils = sys.modules.get("torch._dynamo.utils")  # not imported: no lookup happened
    counters = getattr(utils, "counters", None)
    if counters is None:
        return {name: {"hit": 0, "miss": 0, "bypass": 0} for name in CACHE_COUNTERS}
    return {name: {kind: int(counters[group].get(f"{prefix}_{kind}", 0)) for kind in ("hit", "miss", "bypass")}
            for name, (group, prefix) in CACHE_COUNTERS.items()}


def compile_cache(per_rank: List[Dict[str, Dict[str, int]]], compiled: bool) -> Optional[dict]:
    """metrics.json's ``compile_cache`` from every rank's ``cache_counts()``: the counts summed over the
    ranks and ``state``: ``warm`` (every graph came from Inductor's cache), ``cold`` (none did),
    ``partial``, or ``none`` (compiled, but no cache lookup: the caches are off); null without compile."""
    if not compiled:
        return None
    total = {name: {kind: sum(r[name][kind] for r in per_rank) for kind in ("hit", "miss", "bypass")}
             for name in CACHE_COUNTERS}
    graphs = total["fx_graph"]
    hits, misses = graphs["hit"], graphs["miss"] + graphs["bypass"]
    state = "none" if hits + misses == 0 else "warm" if misses == 0 else "cold" if hits == 0 else "partial"
    return {**total, "state": state}


class RunClock:
    """The training clock and this launch's time breakdown (module docstring)."""

    def __init__(self, started_at: float = 0.0, budget_s: Optional[float] = None) -> None:
        self.started_at = started_at or time.time()  # the job's start (Unix time)
        self.budget_s = budget_s
        self.offset = 0.0  # training seconds of earlier launches (a resume)
        self.first_setup_s: Optional[float] = None  # the first launch's set-up (the end-to-end clock)
        self.setup_s: Optional[float] = None  # this launch's time before its first step
        self._t0: Optional[float] = None  # perf_counter at the first step
        self._compile0 = 0.0
        self._parts = {"eval": 0.0, "checkpoint": 0.0}
        self._stack: List[list] = []  # open parts: [name, start, time of inner parts]
        self._stopped: Optional[float] = None
        self._after = {"eval": 0.0, "checkpoint": 0.0}  # parts timed once the clock had stopped (last.pt)

    @property
    def running(self) -> bool:
        return self._t0 is not None

    def start(self, now: Optional[float] = None) -> None:
        """The first training step of this launch begins (idempotent)."""
        if self._t0 is not None:
            return
        self._t0 = time.perf_counter() if now is None else now
        self.setup_s = max(0.0, time.time() - (time.perf_counter() - self._t0) - self.started_at)
        if self.first_setup_s is None:
            self.first_setup_s = self.setup_s
        self._compile0 = compile_seconds()

    def stop(self) -> None:
        """Training is over: the clock stands still (what follows is set-up time of this launch)."""
        if self._t0 is not None and self._stopped is None:
            self._stopped = time.perf_counter()

    def elapsed(self) -> float:
        """The training clock: seconds since the first step, earlier launches included."""
        if self._t0 is None:
            return self.offset
        return self.offset + (self._stopped or time.perf_counter()) - self._t0

    def end_to_end(self, training_seconds: float) -> float:
        """``training_seconds`` on the end-to-end clock: plus the first launch's set-up."""
        return training_seconds + (self.first_setup_s or 0.0)

    def over_budget(self) -> bool:
        return self.budget_s is not None and self.elapsed() >= self.budget_s

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Time the block as ``name`` (eval, checkpoint), exclusive of parts opened inside it; before
        the first step it is set-up time, counted nowhere else."""
        entry = [name, time.perf_counter(), 0.0]
        self._stack.append(entry)
        try:
            yield
        finally:
            self._stack.pop()
            self._account(entry, time.perf_counter() - entry[1])

    def _account(self, entry: list, spent: float) -> None:
        if self._t0 is None or entry[1] < self._t0:
            return
        self._parts[entry[0]] = self._parts.get(entry[0], 0.0) + spent - entry[2]
        if self._stack:
            self._stack[-1][2] += spent
        elif self._stopped is not None:
            self._after[entry[0]] = self._after.get(entry[0], 0.0) + spent

    def state(self) -> dict:
        """What a checkpoint keeps, so that a resumed run's clock continues."""
        return {"seconds": self.elapsed(), "setup_s": self.first_setup_s}

    def resume(self, state: Optional[dict]) -> None:
        """Continue the clock of the checkpoint's ``state()`` (before ``start``)."""
        if state:
            self.offset = float(state.get("seconds") or 0.0)
            self.first_setup_s = state.get("setup_s")

    def breakdown(self) -> dict:
        """This launch's ``time_breakdown_s``: the parts, each measured on its own, and ``wall_s`` (the
        job's start to now); the parts add up to ``wall_s`` when nothing is lost or counted twice."""
        now_wall, now = time.time(), time.perf_counter()
        wall = now_wall - self.started_at
        if self._t0 is None:
            return {"setup": wall, "compile": 0.0, "train": 0.0, "eval": 0.0, "checkpoint": 0.0, "wall_s": wall}
        training = (self._stopped or now) - self._t0  # this launch's part of the training clock
        compile_s = min(max(0.0, compile_seconds() - self._compile0), training)
        eval_s, ckpt_s = self._parts["eval"], self._parts["checkpoint"]
        inside = eval_s + ckpt_s - sum(self._after.values())  # the parts while the training clock ran
        after = now - self._stopped - sum(self._after.values()) if self._stopped is not None else 0.0  # FLOPs, files
        return {"setup": self.setup_s + after, "compile": compile_s, "train": max(0.0, training - compile_s - inside),
                "eval": eval_s, "checkpoint": ckpt_s, "wall_s": wall}
