"""The training loop: one plain function around the shared step (train/step.py: forward under
autocast, the task's loss, scaled backward, clip, step, average), measuring, evaluating at each
epoch's end and every ``train.eval_every`` steps, checkpointing."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from tqdm import tqdm

from fastpipe.checkpoint.policy import Checkpointer
from fastpipe.data.order import epoch_batches
from fastpipe.checkpoint.state import Position, global_batch
from fastpipe.config import TrainConfig
from fastpipe.data.device import head
from fastpipe.train.evaluation import Evaluator
from fastpipe.train.graph import TrainingGraph, steps_per_epoch as epoch_steps, total_steps
from fastpipe.train.step import train_step
from fastpipe.stages.optim import current_lr, nonfinite_error
from fastpipe.stages.profiling import NoProfiler


@dataclass
class LoopResult:
    steps: int = 0
    final_loss: Optional[float] = None
    val_metrics: Optional[Dict[str, float]] = None  # the held-out metrics that count, after the last evaluation
    val_metrics_raw: Optional[Dict[str, float]] = None  # the raw weights' when an EMA's count
    best: Optional[dict] = None  # the best evaluation by the primary metric: step, value, metrics
    stopped_early: bool = False
    tokens_per_sample: Optional[int] = None  # language modelling: tokens each sample trains on
    sample_inputs: object = None  # two samples of the first batch (FLOPs are counted on them)
    nonfinite_steps: int = 0
    epoch_times_s: List[float] = field(default_factory=list)
    loss_history: List[tuple] = field(default_factory=list)  # (step, loss) at window edges
    grad_norm: Optional[float] = None  # the last pre-clip gradient norm read at a window edge
    stopped_by: Optional[str] = None  # target | early_stop | time_budget; None: the run's full length
    target: Optional[dict] = None  # train.target: metrics.json's target record


def train(g: TrainingGraph, cfg: TrainConfig, meter, recorder, progress: bool, ckpt=None,
          profiler=None) -> LoopResult:
    """Train ``g`` (a TrainingGraph) per ``cfg`` (TrainConfig), feeding ``meter`` and ``recorder``;
    ``ckpt`` (a Checkpointer) restores, saves and stops on signals; ``profiler`` steps each step."""
    ckpt, profiler, accum = ckpt or Checkpointer(cfg), profiler or NoProfiler(), cfg.grad_accum
    steps_per_epoch = epoch_steps(g, cfg)
    total = total_steps(cfg, steps_per_epoch)
    start = ckpt.restore(g, cfg, steps_per_epoch)  # step 0, or where a checkpoint left off
    res, pos = LoopResult(steps=start.step, final_loss=start.final_loss), None
    step_samples = global_batch(cfg, g.runtime.dist.world_size)  # all processes'
    evaluator = Evaluator(g, cfg, ckpt, g.ema, resumed=start.evaluation, clock=meter.run_clock,
                          samples=lambda step: start.samples_seen + (step - start.step) * step_samples)
    if evaluator.stop:  # the checkpoint's run stopped itself, and these settings would stop it there again
        raise stopped_already(ckpt, start, evaluator)
    if start.step >= total or start.epoch >= cfg.epochs:
        raise ckpt.past_the_end(start, total)
    streak = torch.zeros((), device=g.device)  # non-finite bookkeeping stays on the device
    worst = torch.zeros((), device=g.device)
    bad_total = torch.full((), float(start.nonfinite_steps), device=g.device)
    norm = None  # the last pre-clip gradient norm, a device tensor read where the host syncs
    bar = tqdm(total=total, initial=start.step, disable=not progress, unit="step", dynamic_ncols=True)

    def next_batch():  # the data-wait is the time the step waits here
        t0 = meter.before_fetch()
        inputs, targets = next(batches)
        meter.after_fetch(t0)
        if res.sample_inputs is None:  # for counting FLOPs after training: a small copy, no sync
            res.sample_inputs = head(inputs, 2)
            res.tokens_per_sample = g.task.tokens(targets) if hasattr(g.task, "tokens") else None
        if g.batch_recipe is not None:  # MixUp/CutMix, the resize schedule: device work
            inputs, targets = g.batch_recipe.train(inputs, targets, res.steps)
        return inputs, targets

    def synced(loss, norm):
        """What the host reads and checks where it is synced anyway (a window edge, an evaluation, an
        epoch's end), once per step: the loss logged, the non-finite streak, the time budget."""
        if res.loss_history and res.loss_history[-1][0] == res.steps:
            return
        res.final_loss = loss.item()
        res.grad_norm = None if norm is None else norm.item()
        res.loss_history.append((res.steps, res.final_loss))
        recorder.scalars(res.steps, {"train/loss": res.final_loss, "train/grad_norm": res.grad_norm,
                                     "train/lr": current_lr(g.optimizer), **meter.last_window_scalars()})
        bar.set_postfix(loss=f"{res.final_loss:.4f}", **meter.postfix())
        if worst.item() >= cfg.max_nonfinite_steps:
            ckpt.settle(g=g)
            raise nonfinite_error(worst, bad_total, res.steps, cfg, ckpt.latest)
        if cfg.time_budget_s and g.runtime.dist.any_rank(torch.tensor(meter.run_clock.over_budget(), device=g.device)):
            res.stopped_by = "time_budget"  # every rank agrees, at the same step

    def so_far(stop):
        """A stopped run's record keeps what it learnt so far: the best evaluation and the target's curve."""
        best = evaluator.best and {"step": evaluator.best["step"], "value": evaluator.best["value"]}
        target = evaluator.target and evaluator.target.record(res.steps, evaluator.samples(res.steps))
        stop.metrics.update(best=best, target=target)
        return stop

    def evaluate_now(periodic=False):  # outside the timing windows
        meter.close_window()
        evaluator.run(res.steps, periodic)
        recorder.evaluation(res.steps, evaluator.scalars)
        return evaluator.stop

    for epoch in range(start.epoch, cfg.epochs):
        skip = start.step_in_epoch if epoch == start.epoch else 0
        batches, epoch_start, loss = epoch_batches(g.train_loader, epoch, skip * accum), meter.clock(), None
        for step_in_epoch in range(skip + 1, min(steps_per_epoch, skip + total - res.steps) + 1):
            g.schedule.set(res.steps)
            step = train_step(g, cfg, next_batch)
            g.schedule.after_step()
            loss, bad, norm = step.loss, step.skipped, step.grad_norm
            streak = (streak + 1) * bad
            worst = torch.maximum(worst, streak)
            bad_total += bad
            res.steps += 1
            bar.update(1)
            profiler.step()
            edge = meter.after_step(cfg.batch_size * accum)  # this process's samples
            if edge:  # a window edge: the host is synced, reading is free
                synced(loss, norm)
            pos = Position(epoch, step_in_epoch, res.steps, bad_total, loss, step_in_epoch * step_samples,
                           start.samples_seen + (res.steps - start.step) * step_samples, evaluator.state())
            # Where the ranks agree on a stop signal: each step the host syncs at anyway, the same on every rank
            # (a window edge, an evaluation, the epoch's and the run's end), so short windows still stop.
            agree = edge or evaluator.due(res.steps) or step_in_epoch == steps_per_epoch or res.steps >= total
            if ckpt.after_step(g, pos, streak, agree):  # SIGTERM/SIGUSR1: checkpointed, stop here
                raise so_far(ckpt.preempted(pos, g))
            if not res.stopped_by and evaluator.due(res.steps) and step_in_epoch < steps_per_epoch and res.steps < total:
                if evaluate_now(True):
                    break  # the target or early stopping
                synced(loss, norm)  # evaluating synced the host: the checks hold for windows cut short by it too
            if res.stopped_by:
                break  # the time budget (the epoch's end, and the run's, evaluates anyway)
        meter.close_window()
        if loss is not None:  # a step ran in this epoch (not a resume at its very end)
            synced(loss, norm)  # an epoch shorter than a window still logs and checks
            res.epoch_times_s.append(meter.clock() - epoch_start)
            res.final_loss = loss.item()
            recorder.scalars(res.steps, {"train/epoch_time_s": res.epoch_times_s[-1]})
        # Evaluated at this step already: a periodic evaluation before the budget stopped the epoch, or before
        # the checkpoint this run resumed from at the epoch's end.
        evaluated = evaluator.evaluated_at == res.steps
        if evaluator.stop or (not evaluated and evaluate_now()) or res.stopped_by or res.steps >= total:
            break
    bar.close()
    res.val_metrics, res.val_metrics_raw, res.best = evaluator.latest, evaluator.raw, evaluator.best
    res.stopped_early, res.nonfinite_steps = evaluator.stopped_early, int(bad_total.item())
    target = evaluator.target
    res.stopped_by = ("target" if target is not None and target.reached else res.stopped_by
                      or ("early_stop" if res.stopped_early else None))
    paused = res.stopped_by == "time_budget"
    if res.stopped_by and pos is not None:  # the stop's evaluation and the clock after it, for a resume
        pos.evaluation = evaluator.state()
    # a target or early stop: the last step's checkpoint is written again with the evaluation that stopped it
    ckpt.finish(g, pos, streak, always=paused, again=res.stopped_by in ("target", "early_stop"))
    meter.run_clock.stop()
    res.target = target and target.record(res.steps, evaluator.samples(res.steps))
    trained = res.steps - start.step
    if worst.item() >= cfg.max_nonfinite_steps or (trained and worst.item() >= trained):  # or every step was
        raise nonfinite_error(worst, bad_total, res.steps, cfg, ckpt.latest)
    return res


def stopped_already(ckpt: Checkpointer, start: Position, evaluator: Evaluator):
    """The NothingToTrain of a resume whose checkpoint shows the run stopped itself (``evaluator.stop``)."""
    target, best, why = evaluator.target, evaluator.best, evaluator.why_stopped()
    if why == "target":
        said, further = target.describe_reached(), "a harder train.target (or none) trains further"
    else:
        said = (f"early stopping: {evaluator.g.task.primary} gained nothing for {evaluator.since_best} evaluations "
                f"(best {best['value']:.4g} at step {best['step']})")
        further = "a larger train.early_stop_patience (or none) trains further"
    return ckpt.stopped_already(start, said, further, {
        "stopped_by": why, "stopped_early": why == "early_stop",
        "target": target and target.record(start.step, start.samples_seen),
        "best": best and {"step": best["step"], "value": best["value"]}})


def describe_loop(cfg: TrainConfig, steps_per_epoch: int, held_out, direction: str = "") -> str:
    """graph.txt's loop line: the run's length, when it evaluates on how many held-out samples
    (``held_out``: the split, or None), early stopping, and the target (``direction``: e.g.
    ``accuracy >=``) and time budget."""
    samples = "no" if held_out is None else len(held_out) if hasattr(held_out, "__len__") else "a stream of"
    every = f" and every {cfg.eval_every} steps" if cfg.eval_every else ""
    stop = f"  early stop after {cfg.early_stop_patience} without gain" if cfg.early_stop_patience else ""
    first = f" (the first {cfg.eval_batches} batches)" if cfg.eval_batches else ""
    overfit = (f"  overfit: the same first {cfg.overfit_batches} batches every epoch (held out too)"
               if cfg.overfit_batches else "")
    if cfg.target is not None:
        screen = f" (screened on {cfg.target_eval_samples} held-out samples)" if cfg.target_eval_samples else ""
        stop += f"  target {direction} {cfg.target:g}{screen}"
    if cfg.time_budget_s:
        stop += f"  time budget {cfg.time_budget_s:g} s"
    return (f"epochs={cfg.epochs}  steps/epoch={steps_per_epoch}  max_steps={cfg.max_steps}  "
            f"eval each epoch{every} on {samples} held-out samples{first}{overfit}{stop}")
