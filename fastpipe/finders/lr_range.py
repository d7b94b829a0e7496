"""``optimizer.lr=auto``: the learning rate found by a range test on the run's own training step.

Before training, the run's stages are built once more by the one stage builder (graph.build_range_test:
model, placement, precision, compile, EMA, optimizer, the run's loader) from ``train.lr_find_seed``
(null: the run's seed), and the training step itself (train/step.py) runs ``train.lr_find_steps``
times at rates rising exponentially from ``train.lr_find_min`` to ``train.lr_find_max``, each set on
the optimizer as a Python float: only the model's forward and backward are compiled, so no rate
recompiles anything. The smoothed loss curve, where it stopped and the rule's rate come from
lr_curve.py. Under DDP every rank runs the same ramp on its own shard of the batches and the
loss is averaged over the ranks, so every rank stops at the same step and finds the same rate.

The test's graph is then thrown away, the generators reseeded, and the run builds its model and
optimizer from its seed with the found rate (times ``optimizer.lr_auto_factor``) as if it had been
given: the schedule's warm-up and decay apply to it, OneCycleLR's ``max_lr`` is it, and
``train.lr_scaling`` does not scale it (the test measured it at this run's batch).
"""
from __future__ import annotations

import copy
import dataclasses
import gc
import math
import re
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

import torch

from fastpipe.config import Config
from fastpipe.config.registry import choice
from fastpipe.errors import ConfigError, FastpipeWarning, TrainingError
from fastpipe.finders import lr_curve
from fastpipe.runtime import Runtime, seed_everything
from fastpipe.train import graph
from fastpipe.train.first_batch import check_first_batches, part
from fastpipe.train.step import train_step


@dataclass
class LrSearch:
    """What the range test found; ``record()`` is metrics.json's ``lr_search``."""

    rule: str
    min: float
    max: float
    steps: int  # planned: the ramp's length (the curve is shorter when the loss diverged)
    curve: List[Tuple[float, float]]  # (lr, smoothed loss) of each step run
    diverged_at: Optional[float]  # the rate at which the loss diverged (the test stopped), or None
    suggestion: float  # the rule's rate
    factor: float  # optimizer.lr_auto_factor
    seconds: float
    raw: List[float] = field(default_factory=list)  # each step's loss as measured (lr_find.csv)
    reused_from: Optional[str] = None  # train.lr_find_from: the folder whose range test this is
    seed: Optional[int] = None  # the seed of the test's batches and throw-away model
    diverge_ratio: Optional[float] = None  # train.lr_find_diverge_ratio (None: a record from before it)
    diverge_steps: Optional[int] = None  # train.lr_find_diverge_steps
    trial: List[Tuple[float, float]] = field(default_factory=list)  # rule trial: each (rate, its loss at the end)

    @property
    def lr(self) -> float:
        """The rate the run trains at: the suggestion times ``optimizer.lr_auto_factor``."""
        return self.suggestion * self.factor

    def describe(self) -> str:
        """``(auto: valley of a 100-step range test, 4.1 s)``: graph.txt's note beside the rate."""
        scaled = f"{self.factor:g} x {self.suggestion:.3g}, the " if self.factor != 1 else ""
        where = f" in {self.reused_from}" if self.reused_from else f", {self.seconds:.1f} s"
        return f"(auto: {scaled}{self.rule} of a {self.steps}-step range test{where})"

    def annotate(self, optimizer_line: str) -> str:
        """graph.txt's optimizer line with its ``lr=...`` replaced by the found rate and how it was found."""
        return re.sub(r"\blr=\S+", lambda _: f"lr={self.lr:.3g} {self.describe()}", optimizer_line, count=1)

    def record(self) -> dict:
        return {"rule": self.rule, "min": self.min, "max": self.max, "steps": self.steps,
                "curve": [[lr, loss] for lr, loss in self.curve], "diverged_at": self.diverged_at,
                "suggestion": self.suggestion, "factor": self.factor, "seconds": round(self.seconds, 2), "seed": self.seed,
                "diverge_ratio": self.diverge_ratio, "diverge_steps": self.diverge_steps,
                **({"trial": [[lr, loss] for lr, loss in self.trial]} if self.trial else {}),
                **({"reused_from": self.reused_from} if self.reused_from else {})}


def settle(settings: Config, runtime: Runtime, splits=None) -> Tuple[Config, Optional[LrSearch]]:
    """``settings`` with ``optimizer.lr=auto`` replaced by the rate the range test finds, and the test
    (None, and ``settings`` as they are, when the rate is given); ``splits``: the run's built dataset
    stage (built here when None). Every rank calls it."""
    opt, train = settings.optimizer, settings.train
    if (train.lr_find_only or train.lr_find_from) and not opt.lr_auto:
        key = "train.lr_find_only=true" if train.lr_find_only else f"train.lr_find_from={train.lr_find_from}"
        raise ConfigError(f"{key} is about optimizer.lr=auto's range test, and optimizer.lr={opt.params.get('lr')} is "
                          "given: set optimizer.lr=auto, or drop the key")
    if not opt.lr_auto:
        if opt.lr_auto_factor != 1:
            warnings.warn(f"optimizer.lr_auto_factor={opt.lr_auto_factor:g} multiplies a rate optimizer.lr=auto finds; "
                          f"optimizer.lr={opt.params.get('lr')} is given, so it does nothing", FastpipeWarning)
        return settings, None
    opt.refuse_auto_with(settings.launcher.name, choice("launcher", settings.launcher.name).shards)
    search = reused(settings) if train.lr_find_from else find_lr(settings, runtime, splits)
    if runtime.dist.is_main:
        stop = f", stopped at {search.diverged_at:.3g} where the loss diverged" if search.diverged_at else ""
        print(f"fastpipe: optimizer.lr=auto: {search.lr:.3g} {search.describe()}; the ramp from {search.min:g} to "
              f"{search.max:g}{stop}", file=sys.stderr, flush=True)
    return with_found_lr(settings, search.lr), search


# what a reused range test must share with the run (train.lr_find_*); a record from before a key was added
# has no value for it and is not compared on it
SAME = ("rule", "min", "max", "steps", "seed", "diverge_ratio", "diverge_steps")


def test_seed(settings: Config) -> int:
    """The range test's seed: ``train.lr_find_seed``, else the run's."""
    return settings.seed if settings.train.lr_find_seed is None else settings.train.lr_find_seed


def reused(settings: Config) -> LrSearch:
    """The range test ``train.lr_find_from`` holds, as this run's (its own ``optimizer.lr_auto_factor``): the
    same ramp and rule and the same batch size, else one line saying which differs."""
    from fastpipe.record import results

    cfg, folder = settings.train, settings.train.lr_find_from
    metrics = results.read(Path(folder))
    metrics = metrics if isinstance(metrics, dict) else None
    found = (metrics or {}).get("lr_search")
    why = ("no metrics.json" if metrics is None else f"its run's status is {metrics.get('status')}"
           if metrics.get("status") != "ok" else "its metrics.json has no lr_search" if not isinstance(found, dict)
           else None)
    if why:
        raise ConfigError(f"train.lr_find_from={folder}: no finished range test there ({why}); run one with "
                          "optimizer.lr=auto train.lr_find_only=true, or drop the key to run this job's own")
    own = {"rule": cfg.lr_find_rule, "min": cfg.lr_find_min, "max": cfg.lr_find_max, "steps": ramp_steps(cfg),
           "seed": test_seed(settings), "diverge_ratio": cfg.lr_find_diverge_ratio,
           "diverge_steps": cfg.lr_find_diverge_steps}
    differ = [f"train.lr_find_{k}={own[k]} (there {found.get(k)})" for k in SAME
              if found.get(k) != own[k] and found.get(k) is not None]  # None: a record from before the key
    if metrics.get("batch_size") not in (None, cfg.batch_size):
        differ.append(f"train.batch_size={cfg.batch_size} (there {metrics['batch_size']})")
    if differ:
        raise ConfigError(f"train.lr_find_from={folder}: its range test differs from this run's: {', '.join(differ)}; "
                          "reuse one made with the same settings, or drop the key")
    return LrSearch(found["rule"], found["min"], found["max"], found["steps"], [tuple(p) for p in found["curve"]],
                    found.get("diverged_at"), float(found["suggestion"]), float(settings.optimizer.lr_auto_factor),
                    0.0, reused_from=str(folder), seed=found.get("seed"), diverge_ratio=found.get("diverge_ratio"),
                    diverge_steps=found.get("diverge_steps"), trial=[tuple(p) for p in found.get("trial", [])])


def provisional(settings: Config) -> Config:
    """``settings`` with ``optimizer.lr=auto`` standing at the ramp's first rate, for a graph built before
    the rate is known (the batch-size search's probes, the range test itself); as they are otherwise."""
    if not settings.optimizer.lr_auto:
        return settings
    return _with_rate(settings, settings.train.lr_find_min)


def with_found_lr(settings: Config, rate: float) -> Config:
    """``settings`` training at ``rate`` as if ``optimizer.lr`` had been given (OneCycleLR's ``max_lr``
    too), unscaled by ``train.lr_scaling`` (warned about when it is set)."""
    train = settings.train
    if train.lr_scaling != "none":
        warnings.warn(f"train.lr_scaling={train.lr_scaling} does not scale a rate optimizer.lr=auto finds: the range "
                      "test measured it at this run's global batch", FastpipeWarning)
    settings = _with_rate(settings, rate)
    settings.train = dataclasses.replace(train, lr_scaling="none")
    return settings


def _with_rate(settings: Config, rate: float) -> Config:
    """A shallow copy of ``settings`` whose optimizer (and schedule's own peak, ``max_lr``) is ``rate``."""
    settings = copy.copy(settings)
    settings.optimizer = dataclasses.replace(settings.optimizer, params={**settings.optimizer.params, "lr": rate})
    schedule = settings.lr_schedule
    if "max_lr" in schedule.params:
        settings.lr_schedule = dataclasses.replace(schedule, params={**schedule.params, "max_lr": rate})
    return settings


def find_lr(settings: Config, runtime: Runtime, splits=None) -> LrSearch:
    """Run the range test per ``settings.train`` on the run's stages (module docstring), over ``splits``
    (the run's dataset stage; built here when None)."""
    started, cfg, dist = time.perf_counter(), settings.train, runtime.dist
    seed, steps = test_seed(settings), ramp_steps(cfg)
    test = copy.copy(provisional(settings))
    test.seed = seed  # the loader's order too
    seed_everything(seed + dist.rank)
    trial: List[Tuple[float, float]] = []
    try:
        splits = splits if splits is not None else graph.build_splits(test, runtime)
        curve = lr_curve.Curve(ratio=cfg.lr_find_diverge_ratio, window=cfg.lr_find_diverge_steps)
        _run(test, runtime, splits, lr_curve.ramp(cfg.lr_find_min, cfg.lr_find_max, steps), curve, check=True)
        _refuse_unreadable(settings, curve, steps)
        if cfg.lr_find_rule == "trial":
            _release(runtime.device)  # the ramp's graph, before the trials build theirs
            trial = _trial(test, runtime, splits, curve.readable(steps), seed)
            rate, loss = min(trial, key=lambda rate_loss: rate_loss[1])
            if not math.isfinite(loss):
                raise TrainingError(f"optimizer.lr=auto: train.lr_find_rule=trial: every rate tried ("
                                    f"{', '.join(f'{lr:.3g}' for lr, _ in trial)}) gave a non-finite loss within "
                                    f"{cfg.lr_find_trial_steps} steps; choose another train.lr_find_rule, or give "
                                    "optimizer.lr")
            suggestion = rate
        else:
            suggestion = lr_curve.suggest(cfg.lr_find_rule, curve, steps)
    finally:
        _release(runtime.device)
        seed_everything(settings.seed + dist.rank)  # the run starts from its seed, as with a given rate
    if suggestion is None:  # diverged_div10 on a ramp that ended first
        raise TrainingError(f"optimizer.lr=auto: train.lr_find_rule=diverged_div10 reads the rate at which the loss "
                            f"diverges, and it did not diverge up to train.lr_find_max={cfg.lr_find_max:g}; raise "
                            "train.lr_find_max, or choose another train.lr_find_rule")
    return LrSearch(cfg.lr_find_rule, cfg.lr_find_min, cfg.lr_find_max, steps, list(zip(curve.lrs, curve.losses)),
                    curve.diverged_at, suggestion, float(settings.optimizer.lr_auto_factor),
                    time.perf_counter() - started, list(curve.raw), seed=seed, diverge_ratio=curve.ratio,
                    diverge_steps=curve.window, trial=trial)


def ramp_steps(cfg) -> int:
    """The ramp's length for ``train`` settings ``cfg`` (``lr_find_steps``, or ``lr_find_steps_per_decade``)."""
    return lr_curve.planned_steps(cfg.lr_find_min, cfg.lr_find_max, cfg.lr_find_steps, cfg.lr_find_steps_per_decade)


def _refuse_unreadable(settings: Config, curve: lr_curve.Curve, steps: int) -> None:
    """One line, before any training, for a curve no rule can read: non-finite from its first step, too few
    points before it diverged, or a loss that never fell (flat, or rising from its start)."""
    cfg = settings.train
    if not curve.losses:
        why = "precision=fp32 rules out an overflow, else " if settings.precision.name != "fp32" else ""
        raise TrainingError(f"{part(settings, 'model')} gives a non-finite loss at the range test's first step (lr "
                            f"{cfg.lr_find_min:g}, before any update counts): it cannot train at any rate; {why}check "
                            "its initialisation and forward, and the task's loss")
    if curve.readable(steps) is None:
        raise TrainingError(f"optimizer.lr=auto: the range test's loss diverged after {len(curve.losses)} step(s), at "
                            f"lr {curve.diverged_at:.3g}: too few points to read a rate from; ramp more slowly "
                            "(a lower train.lr_find_max or more train.lr_find_steps), or give optimizer.lr")
    if not curve.descended():
        first, low, n = curve.trend[0], curve.low, curve.window
        seen = (f"never fell below the median of its first {n} losses, {first:.4g}" if low >= first else
                f"fell only {(first - low) / abs(first):.1%} from the median of its first {n} losses, {first:.4g}, to "
                f"{low:.4g} at lr {curve.lowest_lr():.3g} (a descent is at least {lr_curve.DESCENT:.0%})")
        end = (f"then diverged at lr {curve.diverged_at:.3g}" if curve.diverged_at is not None
               else f"up to train.lr_find_max={cfg.lr_find_max:g}")
        raise UnreadableCurve(f"optimizer.lr=auto: the range test's loss {seen}, {end} ({len(curve.raw)} steps): no "
                              "rate can be read from it; give the model more steps to learn before the rate grows "
                              "(more train.lr_find_steps, or train.lr_find_steps_per_decade), or give optimizer.lr "
                              "(the curve: lr_find.csv in the run folder)", curve)


class UnreadableCurve(TrainingError):
    """A range test whose loss never fell: the run stops before training; ``curve`` goes to lr_find.csv."""

    def __init__(self, message: str, curve: lr_curve.Curve) -> None:
        super().__init__(message)
        self.curve = curve


def _run(settings: Config, runtime: Runtime, splits, rates: List[float], curve: lr_curve.Curve,
         check: bool = False) -> None:
    """The training step of a freshly built graph at each of ``rates`` in turn, each loss added to ``curve``,
    until it says stop (a collective under DDP). ``check``: the project's parts on a first batch first."""
    g = graph.build_range_test(settings, runtime, splits)
    if check:
        check_first_batches(g, settings)  # the project's parts on a first batch, before any step
    batches, world = _batches(g.train_loader), runtime.dist.world_size
    try:
        for rate in rates:
            for group in g.optimizer.param_groups:
                group["lr"] = rate  # a Python float: nothing compiled sees it
            loss = train_step(g, settings.train, lambda: next(batches)).loss.detach().clone()
            if curve.add(rate, float(runtime.dist.all_reduce_sum(loss)) / world):
                break
    finally:
        batches.close()  # the loader's workers end with its iterator


def _trial(settings: Config, runtime: Runtime, splits, part: lr_curve.Readable, seed: int) -> List[Tuple[float, float]]:
    """``train.lr_find_rule=trial``: each distinct rate that valley, steepest and min_div10 read off the
    curve, trained ``train.lr_find_trial_steps`` steps at that constant rate from the same start (the
    test's seed: the same weights and batches); each (rate, its smoothed loss at the end), inf for a
    rate whose loss went non-finite."""
    rates = sorted({lr_curve.RULES[rule](part) for rule in lr_curve.TRIED})
    tried = []
    for rate in rates:
        seed_everything(seed + runtime.dist.rank)
        curve = lr_curve.Curve(ratio=math.inf, window=1)  # only a non-finite loss ends a trial early
        steps = settings.train.lr_find_trial_steps
        _run(settings, runtime, splits, [rate] * steps, curve)
        _release(runtime.device)
        tried.append((rate, curve.losses[-1] if len(curve.raw) == steps else math.inf))
    return tried


def _batches(loader):
    """The loader's batches, epoch after epoch (the epochs' orders from the test's seed)."""
    from fastpipe.data.sampler import epoch_batches

    epoch = 0
    while True:
        empty = True
        for batch in epoch_batches(loader, epoch, 0):
            empty = False
            yield batch
        if empty:
            raise TrainingError("optimizer.lr=auto: the training loader gave no batch for the range test")
        epoch += 1


def _release(device: torch.device) -> None:
    """The test's graph gone: its tensors back to the allocator, its compiled code dropped."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    dynamo = sys.modules.get("torch._dynamo")  # not imported: nothing was compiled
    if dynamo is not None:
        dynamo.reset()
