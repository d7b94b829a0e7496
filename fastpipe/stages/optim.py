"""The optimizer, and a step that skips non-finite updates without a host synchronisation."""
from __future__ import annotations

import functools
import math
from typing import List, Optional

import torch

from fastpipe.config import OptimizerConfig, TrainConfig
from fastpipe.errors import ConfigError, TrainingError


def param_groups(model: torch.nn.Module, no_decay: bool) -> List[dict]:
    """The model's trainable parameters, and with ``no_decay`` a second group without weight decay for
    biases and normalisation weights (every parameter of fewer than 2 dimensions), as nanoGPT does."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not no_decay:
        return [{"params": params}]
    decay = [p for p in params if p.dim() >= 2]
    flat = [p for p in params if p.dim() < 2]
    return [g for g in ({"params": decay}, {"params": flat, "weight_decay": 0.0}) if g["params"]]


def wants_no_decay(setting, optimizer_class) -> bool:
    """``train.no_decay``: ``auto`` = for Adam and AdamW (whose decay is decoupled from the gradient)."""
    if setting == "auto":
        return getattr(optimizer_class, "__name__", "") in ("AdamW", "Adam")
    return bool(setting)


def build_optimizer(cfg: OptimizerConfig, train: TrainConfig, model: torch.nn.Module,
                    device: torch.device, lr_factor: float = 1.0) -> torch.optim.Optimizer:
    """The optimizer ``cfg`` names, over ``model``'s parameters; its ``lr`` (times ``lr_factor``, the
    ``train.lr_scaling`` rule) is the schedule's peak.

    fused=True is passed when the optimizer takes it (torch's SGD, Adam, AdamW): one kernel per step,
    and device-side skipping of non-finite steps (``step_unless``).
    """
    from fastpipe.instantiate import call_partial

    if cfg.lr_auto:  # the job settles it first (finders/lr_range.py): a graph is built with a rate
        raise ConfigError("optimizer.lr=auto has no rate yet: a graph built outside a run needs optimizer.lr=RATE")
    no_decay = wants_no_decay(train.no_decay, cfg.callable())
    made = cfg.build(params=param_groups(model, no_decay), fused=True)
    optimizer = call_partial("optimizer", cfg.target, cfg.params, made) if isinstance(made, functools.partial) else made
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ConfigError(f"optimizer._target_={cfg.target!r} gives a {type(optimizer).__name__}, not a "
                          "torch.optim.Optimizer")
    for group in optimizer.param_groups:
        group["lr"] = group["lr"] * lr_factor
        group.setdefault("initial_lr", group["lr"])  # the peak the schedule scales (torch's own key)
    return optimizer


def describe_optimizer(optimizer: torch.optim.Optimizer, configured: Optional[dict] = None) -> str:
    """``AdamW(fused)  lr=0.003 (peak)  weight_decay=0.1 (not on 1-d parameters)``: what graph.txt shows.
    ``configured``: the lr (the schedule's peak), betas and momentum as configured (Schedule.configured),
    over the values a torch scheduler has set on the optimizer since."""
    group = {**optimizer.param_groups[0], **(configured or {})}
    fused = "(fused)" if group.get("fused") else ""
    names = {"initial_lr": "lr", "momentum": "momentum", "betas": "betas", "weight_decay": "weight_decay"}
    extras = [f"{name}={_plain(group[k])}" + (" (peak)" if k == "initial_lr" and configured else "")
              for k, name in names.items() if k in group]
    flat = len(optimizer.param_groups) > 1 and optimizer.param_groups[1].get("weight_decay") == 0.0
    text = "  ".join([f"{type(optimizer).__name__}{fused}", *extras])
    return text + ("  (no decay on biases and norm weights)" if flat else "")


def _plain(value):
    """0.01, (0.9, 0.95): a number as configured, not a tensor's repr or float noise (0.010000000000000002)."""
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, (tuple, list)):
        return tuple(_plain(v) for v in value)
    return value


def current_lr(optimizer: torch.optim.Optimizer) -> float:
    """The first parameter group's learning rate now (the schedule's value), as a float: logged as ``train/lr``."""
    lr = optimizer.param_groups[0]["lr"]
    return float(lr.item() if isinstance(lr, torch.Tensor) else lr)


def describe_optimization(optimizer: torch.optim.Optimizer, cfg: TrainConfig, world_size: int,
                          configured: Optional[dict] = None) -> str:
    """graph.txt's optimizer line: the optimizer as configured (``configured``: Schedule.configured),
    accumulation, the lr scaling applied, clipping."""
    scaled = ""
    if cfg.lr_scaling != "none":
        scaled = (f"  (lr_scaling={cfg.lr_scaling}: x{lr_factor(cfg, world_size):.4g} for a global batch of "
                  f"{cfg.batch_size * cfg.grad_accum * world_size} against {cfg.lr_reference_batch})")
    return (f"{describe_optimizer(optimizer, configured)}  grad_accum={cfg.grad_accum}" + scaled
            + (f"  clip_grad_norm={cfg.clip_grad_norm}" if cfg.clip_grad_norm else ""))


def clip_gradients(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, max_norm: float) -> torch.Tensor:
    """Clip the gradients' total norm to ``max_norm``; returns the norm before clipping (a device tensor:
    no host sync). With fp16 loss scaling the gradients are unscaled first, so the norm is the true one."""
    if scaler.is_enabled():
        scaler.unscale_(optimizer)
    params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # FSDP: the norm over every shard


def step_unless(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, skip: torch.Tensor) -> None:
    """Apply the update unless ``skip`` (a 0-d bool tensor) is true, deciding on the device.

    Fused optimizers read ``found_inf`` and leave parameters and state untouched when it is 1 (the
    protocol GradScaler uses), so the step needs no ``.item()``. With fp16 the GradScaler does the
    same for overflowing gradients, which a non-finite loss produces.
    """
    if scaler.is_enabled():
        scaler.step(optimizer)
        scaler.update()
        return
    if not getattr(optimizer, "_step_supports_amp_scaling", False):  # no found_inf protocol: ask the host
        if not bool(skip):
            optimizer.step()
        return
    optimizer.found_inf = skip.float()
    try:
        optimizer.step()
    finally:
        del optimizer.found_inf


def nonfinite_error(worst: torch.Tensor, total: torch.Tensor, steps: int, cfg, checkpoint=None) -> TrainingError:
    """The error that stops a run whose loss stayed NaN/inf for ``train.max_nonfinite_steps`` steps, or
    for every step it trained (a run shorter than the limit: no update ever counted).

    Checkpoints are never written during a non-finite streak, so ``checkpoint`` is the last good one.
    """
    kept = f"; the last good checkpoint is {checkpoint}" if checkpoint else ""
    streak = int(worst.item())
    how = (f"for {streak} steps in a row (train.max_nonfinite_steps={cfg.max_nonfinite_steps})"
           if streak >= cfg.max_nonfinite_steps else f"at every one of the {streak} steps this run trained: nothing "
           "was learnt")
    return TrainingError(f"the loss was non-finite {how}; lower optimizer.lr, or use "
                         f"precision=fp32 to rule out overflow{kept}",
                         metrics={"steps": steps, "nonfinite_steps": int(total.item()),
                                  "checkpoint": None if checkpoint is None else str(checkpoint)})


def lr_factor(cfg, world_size: int) -> float:
    """``train.lr_scaling``: the factor on optimizer.lr for this run's global batch against
    ``train.lr_reference_batch`` (linear: Goyal et al. 2017; sqrt: for adaptive optimizers)."""
    if cfg.lr_scaling == "none":
        return 1.0
    ratio = cfg.batch_size * cfg.grad_accum * world_size / cfg.lr_reference_batch
    return ratio if cfg.lr_scaling == "linear" else math.sqrt(ratio)
