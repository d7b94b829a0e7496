"""The optimizer, and a step that skips non-finite updates without a host synchronisation."""
from __future__ import annotations

import functools
import math

import torch

from fastpipe.config import OptimizerConfig, TrainConfig
from fastpipe.errors import ConfigError, TrainingError


def build_optimizer(cfg: OptimizerConfig, train: TrainConfig, model: torch.nn.Module,
                    device: torch.device) -> torch.optim.Optimizer:
    """The optimizer ``cfg`` names, over ``model``'s parameters; its ``lr`` is the schedule's peak.

    fused=True is passed when the optimizer takes it (torch's SGD, Adam, AdamW): one kernel per step,
    and device-side skipping of non-finite steps (``step_unless``).
    """
    from fastpipe.targets import call_partial

    made = cfg.build(params=list(model.parameters()), fused=True)
    optimizer = call_partial("optimizer", cfg.target, cfg.params, made) if isinstance(made, functools.partial) else made
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ConfigError(f"optimizer._target_={cfg.target!r} gives a {type(optimizer).__name__}, not a "
                          "torch.optim.Optimizer")
    for group in optimizer.param_groups:
        group.setdefault("initial_lr", group["lr"])  # the peak the schedule scales (torch's own key)
    return optimizer


def describe_optimizer(optimizer: torch.optim.Optimizer) -> str:
    """``AdamW(fused)  weight_decay=0.1``: what graph.txt shows."""
    group = optimizer.param_groups[0]
    fused = "(fused)" if group.get("fused") else ""
    extras = "  ".join(f"{k}={group[k]}" for k in ("initial_lr", "momentum", "betas", "weight_decay") if k in group)
    return f"{type(optimizer).__name__}{fused}  {extras}".replace("initial_lr=", "lr=").rstrip()


def lr_factor(cfg: TrainConfig, step: int, total_steps: int) -> float:
    """The learning rate of optimizer step ``step`` (0-based) of ``total_steps``, as a fraction of the peak.

    A pure function of the step, so a resumed run continues the same schedule with no state to save.
    ``cosine``: linear warm-up over ``lr_warmup_steps``, then cosine decay to zero; ``constant``: 1.
    """
    if cfg.lr_schedule == "constant":
        return 1.0
    if step < cfg.lr_warmup_steps:
        return (step + 1) / cfg.lr_warmup_steps
    progress = (step - cfg.lr_warmup_steps) / max(1, total_steps - cfg.lr_warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def set_learning_rate(optimizer: torch.optim.Optimizer, factor: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = group["initial_lr"] * factor  # a Python float: fused kernels take it as a scalar, no sync


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
    """The error that stops a run whose loss stayed NaN/inf for ``train.max_nonfinite_steps`` steps.

    Checkpoints are never written during a non-finite streak, so ``checkpoint`` is the last good one.
    """
    kept = f"; the last good checkpoint is {checkpoint}" if checkpoint else ""
    return TrainingError(f"the loss was non-finite for {int(worst.item())} steps in a row "
                         f"(train.max_nonfinite_steps={cfg.max_nonfinite_steps}); lower optimizer.lr, or use "
                         f"precision=fp32 to rule out overflow{kept}",
                         metrics={"steps": steps, "nonfinite_steps": int(total.item()),
                                  "checkpoint": None if checkpoint is None else str(checkpoint)})
