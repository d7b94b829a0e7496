"""The optimizer, and a step that skips non-finite updates without a host synchronisation."""
from __future__ import annotations

import math

import torch

from fastpipe.config import TrainConfig
from fastpipe.errors import TrainingError


def build_optimizer(cfg: TrainConfig, params, device: torch.device) -> torch.optim.Optimizer:
    """SGD (momentum) or AdamW, fused: one kernel per step, and device-side skipping (below)."""
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
                               fused=True)
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)


def learning_rate(cfg: TrainConfig, step: int, total_steps: int) -> float:
    """The learning rate for optimizer step ``step`` (0-based) of ``total_steps``.

    A pure function of the step, so a resumed run continues the same schedule with no state to save.
    ``cosine``: linear warm-up over ``lr_warmup_steps``, then cosine decay to zero; ``constant``: ``lr``.
    """
    if cfg.lr_schedule == "constant":
        return cfg.lr
    if step < cfg.lr_warmup_steps:
        return cfg.lr * (step + 1) / cfg.lr_warmup_steps
    progress = (step - cfg.lr_warmup_steps) / max(1, total_steps - cfg.lr_warmup_steps)
    return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr  # a Python float: fused kernels take it as a scalar, no device sync


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
                         f"(train.max_nonfinite_steps={cfg.max_nonfinite_steps}); lower train.lr, or use "
                         f"precision=fp32 to rule out overflow{kept}",
                         metrics={"steps": steps, "nonfinite_steps": int(total.item()),
                                  "checkpoint": None if checkpoint is None else str(checkpoint)})
