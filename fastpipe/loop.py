"""The training loop: one plain function (forward under autocast, the task's loss, scaled backward, step,
measure), and the held-out evaluation it runs after each epoch."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from tqdm import tqdm

from fastpipe.checkpoint import Checkpointer, epoch_batches
from fastpipe.checkpoint_state import Position, global_batch
from fastpipe.config import TrainConfig
from fastpipe.data.device import head
from fastpipe.graph import TrainingGraph
from fastpipe.optim import (
    lr_factor,
    nonfinite_error,
    set_learning_rate,
    step_unless,
)
from fastpipe.profiling import NoProfiler


@dataclass
class LoopResult:
    steps: int = 0
    final_loss: Optional[float] = None
    val_metrics: Optional[Dict[str, float]] = None  # the task's held-out metrics after the last epoch
    tokens_per_sample: Optional[int] = None  # language modelling: tokens each sample trains on
    sample_inputs: object = None  # two samples of the first batch (FLOPs are counted on them)
    nonfinite_steps: int = 0
    epoch_times_s: List[float] = field(default_factory=list)
    loss_history: List[tuple] = field(default_factory=list)  # (step, loss) at window edges


def batch_length(target) -> int:
    """Samples in a batch: the first dimension of the target (or of its first tensor)."""
    while isinstance(target, (tuple, list, dict)):
        target = next(iter(target.values())) if isinstance(target, dict) else target[0]
    return int(target.shape[0]) if isinstance(target, torch.Tensor) and target.dim() else 1


@torch.no_grad()
def evaluate(g) -> Optional[Dict[str, float]]:
    """The task's held-out metrics: per-batch sums kept on the device, summed over the split and the
    ranks in one all-reduce, divided by the number of held-out samples; then ``summarize``."""
    if g.eval_loader is None:
        return None
    model = g.eval_module
    model.eval()
    names, totals, count = None, None, 0
    for inputs, targets in g.eval_loader:
        with g.precision.autocast():
            sums = g.task.metrics(model(inputs), targets)
        if totals is None:
            names = list(sums)
            totals = torch.zeros(len(names) + 1, dtype=torch.float64, device=g.device)
        totals[:-1] += torch.stack([torch.as_tensor(sums[n], device=g.device).detach().double() for n in names])
        count += batch_length(targets)
    model.train()
    if totals is None:
        totals = torch.zeros(1, dtype=torch.float64, device=g.device)  # this rank had no batch
    totals[-1] = count
    totals = g.all_reduce_sum(totals).tolist()
    if not totals[-1] or names is None:
        return None
    means = {n: v / totals[-1] for n, v in zip(names, totals)}
    summarize = getattr(g.task, "summarize", None)
    return {**means, **(summarize(means) if callable(summarize) else {})}


def train(g: TrainingGraph, cfg: TrainConfig, meter, recorder, warnings: List[str], progress: bool, ckpt=None, profiler=None) -> LoopResult:
    """Train ``g`` (a TrainingGraph) per ``cfg`` (TrainConfig), feeding ``meter`` and ``recorder``;
    ``ckpt`` (a Checkpointer) restores, saves and stops on signals; ``profiler`` steps each step."""
    ckpt, profiler, accum = ckpt or Checkpointer(cfg), profiler or NoProfiler(), cfg.grad_accum
    steps_per_epoch = len(g.train_loader) // accum
    total = steps_per_epoch * cfg.epochs if cfg.max_steps is None else min(cfg.max_steps, steps_per_epoch * cfg.epochs)
    start = ckpt.restore(g, steps_per_epoch, warnings)  # step 0, or where a checkpoint left off
    if start.step >= total or start.epoch >= cfg.epochs:
        raise ckpt.past_the_end(start, total)
    res, pos = LoopResult(steps=start.step, final_loss=start.final_loss), None
    samples_per_step, step_samples = g.batch_size * accum, global_batch(g)  # this process's; all processes'
    streak = torch.zeros((), device=g.device)  # non-finite bookkeeping stays on the device
    worst = torch.zeros((), device=g.device)
    bad_total = torch.full((), float(start.nonfinite_steps), device=g.device)
    bar = tqdm(total=total, initial=start.step, disable=not progress, unit="step", dynamic_ncols=True)

    def forward_backward(module, inputs, targets, last_micro):
        with g.sync_context(last_micro), g.precision.autocast():
            loss = g.task.loss(module(inputs), targets) / accum
        g.precision.scaler.scale(loss).backward()
        return loss.detach()

    for epoch in range(start.epoch, cfg.epochs):
        skip = start.step_in_epoch if epoch == start.epoch else 0
        batches, epoch_start, loss = epoch_batches(g.train_loader, epoch, skip * accum), meter.clock(), None
        for step_in_epoch in range(skip + 1, min(steps_per_epoch, skip + total - res.steps) + 1):
            loss = torch.zeros((), device=g.device)
            for micro in range(accum):
                t0 = meter.before_fetch()
                inputs, targets = next(batches)
                meter.after_fetch(t0)
                if res.sample_inputs is None:  # for counting FLOPs after training: a small copy, no sync
                    res.sample_inputs = head(inputs, 2)
                    res.tokens_per_sample = g.task.tokens(targets) if hasattr(g.task, "tokens") else None
                loss += g.compiled.call(lambda m: forward_backward(m, inputs, targets, micro == accum - 1), warnings)
            bad = g.any_rank(~torch.isfinite(loss))  # all ranks skip together, or DDP replicas diverge
            set_learning_rate(g.optimizer, lr_factor(cfg, res.steps, total))
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
            pos = Position(epoch, step_in_epoch, res.steps, bad_total, loss, step_in_epoch * step_samples,
                           start.samples_seen + (res.steps - start.step) * step_samples)
            if ckpt.after_step(g, pos, streak, edge):  # SIGTERM/SIGUSR1: checkpointed, stop here
                raise ckpt.preempted(pos)
        meter.close_window()
        res.epoch_times_s.append(meter.clock() - epoch_start)
        res.val_metrics = evaluate(g)
        res.final_loss = res.final_loss if loss is None else loss.item()
        recorder.scalars(res.steps, {**{f"val/{k}": v for k, v in (res.val_metrics or {}).items()},
                                     "train/epoch_time_s": res.epoch_times_s[-1]})
        if res.steps >= total:
            break
    bar.close()
    res.nonfinite_steps = int(bad_total.item())
    if worst.item() >= cfg.max_nonfinite_steps:
        raise nonfinite_error(worst, bad_total, res.steps, cfg, ckpt.latest)
    ckpt.finish(g, pos, streak)
    return res

