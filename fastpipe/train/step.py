"""One optimizer step, the same for training and for the batch-size search's probes.

``train.grad_accum`` micro-batches (forward under autocast, the task's loss, scaled backward; the
gradient reduction skipped on all but the last), gradient clipping, a skip of non-finite updates
agreed by every rank on the device, the optimizer step, and the EMA's update. No host sync.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import torch

from fastpipe.config import TrainConfig
from fastpipe.stages.optim import clip_gradients, step_unless
from fastpipe.train.graph import TrainingGraph


@dataclass(frozen=True)
class StepResult:
    """Device tensors, read only where the host syncs anyway (window edges)."""

    loss: torch.Tensor  # the step's loss (summed over its micro-batches, each divided by grad_accum)
    skipped: torch.Tensor  # 0-d bool: the update was skipped (a non-finite loss or gradient on any rank)
    grad_norm: Optional[torch.Tensor]  # the norm before clipping, when train.clip_grad_norm is set


def train_step(g: TrainingGraph, cfg: TrainConfig, next_batch: Callable[[], Tuple]) -> StepResult:
    """One optimizer step of ``g`` per ``cfg``, taking ``cfg.grad_accum`` batches from ``next_batch()``."""
    accum = cfg.grad_accum
    loss = torch.zeros((), device=g.device)
    for micro in range(accum):
        inputs, targets = next_batch()
        last = micro == accum - 1
        loss += g.compiled.call(lambda module: _forward_backward(g, module, inputs, targets, accum, last))
    bad, norm = ~torch.isfinite(loss), None
    if cfg.clip_grad_norm:
        norm = clip_gradients(g.optimizer, g.precision.scaler, cfg.clip_grad_norm)
        bad = bad | ~torch.isfinite(norm)  # an overflowing gradient would clip to NaN
    bad = g.runtime.dist.any_rank(bad)  # all ranks skip together, or DDP replicas diverge
    step_unless(g.optimizer, g.precision.scaler, bad)
    g.optimizer.zero_grad(set_to_none=True)
    if g.ema is not None:
        g.ema.update_parameters(g.model)
    return StepResult(loss, bad, norm)


def _forward_backward(g: TrainingGraph, module, inputs, targets, accum: int, last_micro: bool) -> torch.Tensor:
    with g.parallel.sync(last_micro), g.precision.autocast():
        loss = g.task.loss(module(inputs), targets) / accum
    with g.compiled.backward_context():
        g.precision.scaler.scale(loss).backward()
    return loss.detach()
