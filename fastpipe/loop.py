"""The training loop: one plain function (forward under autocast, scaled backward, step, measure)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.nn.functional as F
from tqdm import tqdm

from fastpipe.checkpoint import Checkpointer, Position, epoch_batches
from fastpipe.config import TrainConfig
from fastpipe.graph import TrainingGraph
from fastpipe.optim import (
    learning_rate,
    nonfinite_error,
    set_learning_rate,
    step_unless,
)
from fastpipe.profiling import NoProfiler


@dataclass
class LoopResult:
    steps: int = 0
    final_loss: Optional[float] = None
    accuracy: Optional[float] = None
    val_loss: Optional[float] = None
    nonfinite_steps: int = 0
    epoch_times_s: List[float] = field(default_factory=list)
    loss_history: List[tuple] = field(default_factory=list)  # (step, loss) at window edges


@torch.no_grad()
def evaluate(g) -> tuple:
    """Held-out top-1 accuracy and mean loss over the whole split (summed over ranks)."""
    if g.eval_loader is None:
        return None, None
    model = g.eval_module
    model.eval()
    totals = torch.zeros(3, device=g.device)  # correct, count, loss sum: one all-reduce for all three
    for images, labels in g.eval_loader:
        with g.precision.autocast():
            logits = model(images)
        totals[0] += (logits.argmax(1) == labels).sum()
        totals[1] += labels.numel()
        totals[2] += F.cross_entropy(logits.float(), labels, reduction="sum")
    model.train()
    correct, count, loss_sum = g.all_reduce_sum(totals).tolist()
    return (correct / count, loss_sum / count) if count else (None, None)


def train(g: TrainingGraph, cfg: TrainConfig, meter, recorder, warnings: List[str], progress: bool, ckpt=None, profiler=None) -> LoopResult:
    """Train ``g`` (a TrainingGraph) per ``cfg`` (TrainConfig), feeding ``meter`` and ``recorder``;
    ``ckpt`` (a Checkpointer) restores, saves and stops on signals; ``profiler`` steps each step."""
    ckpt, profiler, accum = ckpt or Checkpointer(cfg), profiler or NoProfiler(), cfg.grad_accum
    steps_per_epoch = len(g.train_loader) // accum
    total = steps_per_epoch * cfg.epochs if cfg.max_steps is None else min(cfg.max_steps, steps_per_epoch * cfg.epochs)
    start = ckpt.restore(g, steps_per_epoch, warnings)  # step 0, or where a checkpoint left off
    res, pos = LoopResult(steps=start.step, final_loss=start.final_loss), None
    samples_per_step = g.batch_size * accum
    streak = torch.zeros((), device=g.device)  # non-finite bookkeeping stays on the device
    worst = torch.zeros((), device=g.device)
    bad_total = torch.full((), float(start.nonfinite_steps), device=g.device)
    bar = tqdm(total=total, initial=start.step, disable=not progress, unit="step", dynamic_ncols=True)

    def forward_backward(module, images, labels, last_micro):
        with g.sync_context(last_micro), g.precision.autocast():
            loss = F.cross_entropy(module(images), labels) / accum
        g.precision.scaler.scale(loss).backward()
        return loss.detach()

    for epoch in range(start.epoch, cfg.epochs):
        skip = start.step_in_epoch if epoch == start.epoch else 0
        batches, epoch_start, loss = epoch_batches(g.train_loader, epoch, skip * accum), meter.clock(), None
        for step_in_epoch in range(skip + 1, min(steps_per_epoch, skip + total - res.steps) + 1):
            loss = torch.zeros((), device=g.device)
            for micro in range(accum):
                t0 = meter.before_fetch()
                images, labels = next(batches)
                meter.after_fetch(t0)
                loss += g.compiled.call(lambda m: forward_backward(m, images, labels, micro == accum - 1), warnings)
            bad = g.any_rank(~torch.isfinite(loss))  # all ranks skip together, or DDP replicas diverge
            set_learning_rate(g.optimizer, learning_rate(cfg, res.steps, total))
            step_unless(g.optimizer, g.precision.scaler, bad)
            g.optimizer.zero_grad(set_to_none=True)
            streak = (streak + 1) * bad
            worst = torch.maximum(worst, streak)
            bad_total += bad
            res.steps += 1
            bar.update(1)
            profiler.step()
            edge = meter.after_step(samples_per_step)
            if edge:  # a window edge: the host is synced, reading is free
                res.final_loss = loss.item()
                res.loss_history.append((res.steps, res.final_loss))
                recorder.scalars(res.steps, {"train/loss": res.final_loss, **meter.last_window_scalars()})
                bar.set_postfix(loss=f"{res.final_loss:.4f}", **meter.postfix())
                if worst.item() >= cfg.max_nonfinite_steps:
                    raise nonfinite_error(worst, bad_total, res.steps, cfg, ckpt.latest)
            pos = Position(epoch, step_in_epoch, res.steps, bad_total, loss)
            if ckpt.after_step(g, pos, streak, edge):  # SIGTERM/SIGUSR1: checkpointed, stop here
                raise ckpt.preempted(pos)
        meter.close_window()
        res.epoch_times_s.append(meter.clock() - epoch_start)
        res.accuracy, res.val_loss = evaluate(g)
        res.final_loss = res.final_loss if loss is None else loss.item()
        recorder.scalars(res.steps, {"val/accuracy": res.accuracy, "val/loss": res.val_loss,
                                     "train/epoch_time_s": res.epoch_times_s[-1]})
        if res.steps >= total:
            break
    bar.close()
    res.nonfinite_steps = int(bad_total.item())
    if worst.item() >= cfg.max_nonfinite_steps:
        raise nonfinite_error(worst, bad_total, res.steps, cfg, ckpt.latest)
    ckpt.finish(g, pos, streak)
    return res

