"""The ``lr_schedule`` group: how the learning rate moves over the run.

A schedule config is a ``_target_`` giving either

- a pure function of the step (``cosine``, ``constant``, or a project's own callable returning
  ``factor(step, total_steps) -> float``): the optimizer's lr (its peak) times the factor,
  recomputed every step, so a resumed run continues the same schedule with nothing to save; or
- a torch scheduler with ``_partial_: true`` (``torch.optim.lr_scheduler.OneCycleLR`` ...): built on
  the optimizer (``total_steps`` / ``T_max`` given the run's steps when the config leaves them
  unset), stepped after every optimizer step, its state saved in checkpoints.

Both are host-side Python floats set on the optimizer's groups: no device synchronisation.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Callable, Optional

import torch

from fastpipe.config import LrScheduleConfig
from fastpipe.errors import ConfigError, FastpipeWarning


def cosine(warmup_steps: int = 0, min_lr_ratio: float = 0.0) -> Callable[[int, int], float]:
    """Linear warm-up over ``warmup_steps``, then cosine decay to ``min_lr_ratio`` x the peak."""
    if warmup_steps < 0 or not 0.0 <= min_lr_ratio <= 1.0:
        raise ConfigError(f"lr_schedule.warmup_steps={warmup_steps} must be >= 0 and lr_schedule.min_lr_ratio="
                          f"{min_lr_ratio} in [0, 1]")

    def factor(step: int, total_steps: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def constant(warmup_steps: int = 0) -> Callable[[int, int], float]:
    """The optimizer's lr throughout (after an optional linear warm-up)."""
    if warmup_steps < 0:
        raise ConfigError(f"lr_schedule.warmup_steps={warmup_steps} must be >= 0")

    def factor(step: int, total_steps: int) -> float:
        return (step + 1) / warmup_steps if step < warmup_steps else 1.0

    return factor


class Schedule:
    """What the loop calls: ``set(step)`` before each optimizer step, ``after_step()`` after it.

    ``configured``: the optimizer's lr, betas and momentum as configured, before a torch scheduler
    moved them (OneCycleLR starts at max_lr / div_factor and cycles beta1), with ``initial_lr`` the
    run's peak; graph.txt states these, not the schedule's state at step 0."""

    def __init__(self, optimizer: torch.optim.Optimizer, total_steps: int, factor=None, scheduler=None,
                 name: str = "", configured: Optional[dict] = None, params: Optional[dict] = None) -> None:
        self.optimizer, self.total_steps, self.factor, self.scheduler, self.name = \
            optimizer, total_steps, factor, scheduler, name
        self.params = dict(params or {})  # the lr_schedule config's own arguments
        self.base_lr = (configured or {}).get("initial_lr")  # the optimizer's lr, which a function scales
        self.configured = {**(configured or {}), "initial_lr": self.peak_lr()}

    def peak_lr(self) -> Optional[float]:
        """The highest learning rate of the run: a torch scheduler's ``max_lr`` where it sets one
        (OneCycleLR, CyclicLR), the optimizer's lr times the factor's highest value for a function."""
        if self.scheduler is not None:
            return self.optimizer.param_groups[0].get("max_lr", self.base_lr)
        if self.factor is None or self.base_lr is None:
            return self.base_lr
        return self.base_lr * max(self.factor(step, self.total_steps) for step in _sample_steps(self.total_steps))

    @property
    def stateful(self) -> bool:
        return self.scheduler is not None

    def set(self, step: int) -> None:
        if self.factor is None:
            return  # a torch scheduler set the lr when it last stepped
        f = self.factor(step, self.total_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = group["initial_lr"] * f  # a Python float: fused kernels take it as a scalar

    def after_step(self) -> None:
        if self.scheduler is not None:
            self.scheduler.step()

    def state_dict(self) -> Optional[dict]:
        if self.scheduler is None:
            return None
        return {"scheduler": self.scheduler.state_dict(), "total_steps": self.total_steps}

    def resume(self, state: Optional[dict], step: int) -> None:
        """A torch scheduler continued at optimizer step ``step``: its saved state when this run has the
        saved run's length and position, else built for this run and advanced to ``step`` (a longer
        run, or a resume with another global batch, would otherwise step OneCycleLR past its end or
        leave it misaligned)."""
        if self.scheduler is None or not state:
            return
        saved = state["scheduler"]
        if state.get("total_steps") == self.total_steps and saved.get("last_epoch") == step:
            self.scheduler.load_state_dict(saved)
            return
        with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()": intended here
            warnings.simplefilter("ignore", UserWarning)
            for _ in range(step):
                self.scheduler.step()
        warnings.warn(f"lr_schedule {self.name}: the checkpoint's scheduler ran over {state.get('total_steps')} "
                      f"steps and stood at step {saved.get('last_epoch')}; this run has {self.total_steps} steps "
                      f"and resumes at step {step}: the scheduler was built for this run and advanced to it",
                      FastpipeWarning)

    def describe(self) -> str:
        """graph.txt's schedule line: what it is and its shape over the run's ``total_steps``."""
        kind = "torch scheduler, stepped each step" if self.stateful else "a function of the step"
        return f"{self.name} ({kind}) over {self.total_steps} steps: {self.shape()}"

    def shape(self) -> str:
        """``lr 0.0004 -> 0.01 (peak) at step 2 -> 4e-08 at step 10``, and a cycled momentum."""
        if self.scheduler is None:
            lrs = [(step, self.base_lr * self.factor(step, self.total_steps)) for step in _sample_steps(self.total_steps)]
            top = max(lrs, key=lambda pair: pair[1])
            start = f"{lrs[0][1]:.4g} at step 0 -> " if top[0] else ""
            return f"lr {start}{top[1]:.4g} (peak) at step {top[0]} -> {lrs[-1][1]:.4g} at the end"
        if isinstance(self.scheduler, torch.optim.lr_scheduler.OneCycleLR):
            return self._one_cycle_shape()
        args = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{type(self.scheduler).__name__}({args}), from lr {self.configured['initial_lr']:.4g}"

    def _one_cycle_shape(self) -> str:
        group, defaults = self.optimizer.param_groups[0], _defaults(torch.optim.lr_scheduler.OneCycleLR)
        peak = int(float(self.params.get("pct_start", defaults["pct_start"])) * self.total_steps) - 1
        anneal = self.params.get("anneal_strategy", defaults["anneal_strategy"])
        text = (f"lr {group['initial_lr']:.4g} at step 0 -> {group['max_lr']:.4g} (peak) at step {max(0, peak)} -> "
                f"{group['min_lr']:.4g} at the end ({anneal})")
        if "max_momentum" in group:  # cycle_momentum: the scheduler sets beta1 (or momentum) each step
            name = "beta1" if "betas" in group else "momentum"
            was = self.configured["betas"][0] if "betas" in group else self.configured.get("momentum")
            text += (f"; {name} {group['max_momentum']:.4g} -> {group['base_momentum']:.4g} at the peak -> "
                     f"{group['max_momentum']:.4g} (cycle_momentum: in place of the optimizer's {was})")
        return text


def build_schedule(cfg: LrScheduleConfig, optimizer: torch.optim.Optimizer, total_steps: int,
                   lr_factor: float = 1.0) -> Schedule:
    """The Schedule ``cfg`` names for ``optimizer`` over a run of ``total_steps`` optimizer steps. A
    scheduler that sets its own peak (OneCycleLR's ``max_lr``) gets it times ``lr_factor``
    (``train.lr_scaling``), as the optimizer's lr does."""
    from fastpipe.instantiate import call_partial

    if lr_factor != 1.0 and cfg.params.get("max_lr") is not None:
        cfg = dataclasses.replace(cfg, params={**cfg.params, "max_lr": cfg.params["max_lr"] * lr_factor})

    first = optimizer.param_groups[0]
    configured = {k: first[k] for k in ("initial_lr", "betas", "momentum") if k in first}  # before a scheduler moves them
    made = cfg.build(optimizer=optimizer, total_steps=total_steps, T_max=total_steps)
    if isinstance(made, functools.partial):
        made = call_partial("lr_schedule", cfg.target, cfg.params, made)
    if isinstance(made, torch.optim.lr_scheduler.LRScheduler):
        return Schedule(optimizer, total_steps, scheduler=made, name=cfg.short_name, configured=configured,
                        params=cfg.params)
    if callable(made):
        return Schedule(optimizer, total_steps, factor=made, name=cfg.short_name, configured=configured,
                        params=cfg.params)
    raise ConfigError(f"lr_schedule._target_={cfg.target!r} gives a {type(made).__name__}; give a torch.optim."
                      "lr_scheduler class with _partial_: true, or a function returning factor(step, total_steps)")


def _sample_steps(total_steps: int) -> list:
    """Steps at which a function schedule is read to find its peak and shape: every step of a run up to
    2,000 steps, else about 2,000 evenly spaced ones and the last (a factor is a pure function of the step)."""
    total = max(1, total_steps)
    return sorted(set(range(0, total, max(1, total // 2000))) | {total - 1})


def _defaults(cls) -> dict:
    """A torch scheduler's keyword defaults (what a config that leaves a key out gets)."""
    import inspect

    return {k: p.default for k, p in inspect.signature(cls).parameters.items() if p.default is not p.empty}
