"""The training loop: one plain function around the shared step (train/step.py: forward under
autocast, the task's loss, scaled backward, clip, step, average), measuring, evaluating at each
epoch's end and every ``train.eval_every`` steps, checkpointing."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from tqdm import tqdm

from fastpipe.checkpoint.nothing_to_train import NothingToTrain
from fastpipe.checkpoint.policy import Checkpointer
from fastpipe.checkpoint.state import Position, global_batch
from fastpipe.data.sampler import epoch_batches
from fastpipe.config import TrainConfig
from fastpipe.data.batches import head
from fastpipe.stages.profiling import NoProfiler
from fastpipe.train.evaluation import Evaluator, epoch_ends_screened
from fastpipe.train.graph import TrainingGraph, steps_per_epoch as epoch_steps, total_steps
from fastpipe.train.held_out import read_ahead
from fastpipe.train.host_checks import NonfiniteSteps, SyncedChecks
from fastpipe.train.step import train_step


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


class BatchFeed:
    """The step's batches (``train_step``'s ``next_batch``): each fetch timed as the data-wait, a small
    copy of the first batch kept (FLOPs are counted on it after training), the batch recipe applied."""

    def __init__(self, g: TrainingGraph, meter, result: LoopResult) -> None:
        self.g, self.meter, self.result = g, meter, result
        self.batches = iter(())  # the epoch's: set by the loop

    def __call__(self):
        t0 = self.meter.before_fetch()  # the data-wait is the time the step waits here
        inputs, targets = next(self.batches)
        self.meter.after_fetch(t0)
        res, g = self.result, self.g
        if res.sample_inputs is None:  # a small copy, no sync
            res.sample_inputs = head(inputs, 2)
            res.tokens_per_sample = g.task.tokens(targets) if hasattr(g.task, "tokens") else None
        if g.batch_recipe is not None:  # MixUp/CutMix, the resize schedule: device work
            inputs, targets = g.batch_recipe.train(inputs, targets, res.steps)
        return inputs, targets


def train(g: TrainingGraph, cfg: TrainConfig, meter, recorder, progress: bool, ckpt=None,
          profiler=None) -> LoopResult:
    """Train ``g`` (a TrainingGraph) per ``cfg`` (TrainConfig), feeding ``meter`` and ``recorder``;
    ``ckpt`` (a Checkpointer) restores, saves and stops on signals; ``profiler`` steps each step."""
    ckpt, profiler = ckpt or Checkpointer(cfg), profiler or NoProfiler()
    steps_per_epoch = epoch_steps(g, cfg)
    total = total_steps(cfg, steps_per_epoch)
    start = ckpt.restore(g, cfg, steps_per_epoch)  # step 0, or where a checkpoint left off
    res, pos = LoopResult(steps=start.step, final_loss=start.final_loss), None
    step_samples = global_batch(cfg, g.runtime.dist.world_size)  # all processes'

    def samples(step: int) -> int:  # trained on by ``step``, all processes'
        return start.samples_seen + (step - start.step) * step_samples

    evaluator = _evaluator(g, cfg, ckpt, start, meter, samples, total)
    nonfinite, feed = NonfiniteSteps(g.device, start.nonfinite_steps), BatchFeed(g, meter, res)
    bar = tqdm(total=total, initial=start.step, disable=not progress, unit="step", dynamic_ncols=True)
    synced = SyncedChecks(g, cfg, meter, recorder, ckpt, res, bar, nonfinite, total)
    for epoch in range(start.epoch, cfg.epochs):
        skip = start.step_in_epoch if epoch == start.epoch else 0
        feed.batches = epoch_batches(g.train_loader, epoch, skip * cfg.grad_accum)
        epoch_start, loss, norm = meter.clock(), None, None
        for step_in_epoch in range(skip + 1, min(steps_per_epoch, skip + total - res.steps) + 1):
            g.schedule.set(res.steps)
            step = train_step(g, cfg, feed)
            g.schedule.after_step()
            loss, norm = step.loss, step.grad_norm
            nonfinite.add(step.skipped)
            res.steps += 1
            if res.steps == start.step + 1:  # its memory now reserved: what is left may hold held-out batches
                read_ahead(cfg.eval_read_ahead, g.target_held_out, g.held_out)
            bar.update(1)
            profiler.step()
            edge = meter.after_step(cfg.batch_size * cfg.grad_accum)  # this process's samples
            synced.after_step(edge, loss, norm)  # a window edge: every check; between edges, the time budget
            pos = Position(epoch, step_in_epoch, res.steps, nonfinite.total, loss, step_in_epoch * step_samples,
                           samples(res.steps), evaluator.state())
            # Where the ranks agree on a stop signal: each step the host syncs at anyway, the same on every rank
            # (a window edge, an evaluation, the epoch's and the run's end), so short windows still stop.
            agree = edge or evaluator.due(res.steps) or step_in_epoch == steps_per_epoch or res.steps >= total
            if ckpt.after_step(g, pos, nonfinite.streak, agree):  # SIGTERM/SIGUSR1: checkpointed, stop here
                raise _so_far(ckpt.preempted(pos, g), evaluator, res.steps)
            if not res.stopped_by and evaluator.due(res.steps) and step_in_epoch < steps_per_epoch and res.steps < total:
                if _evaluate(evaluator, meter, recorder, res.steps, screened=True):
                    break  # the target or early stopping
                synced(loss, norm)  # evaluating synced the host: the checks hold for windows cut short by it too
            if res.stopped_by:
                break  # the time budget (the epoch's end, and the run's, evaluates anyway)
        _epoch_end(res, synced, loss, norm, meter, epoch_start, recorder)
        # Evaluated at this step already: a periodic evaluation before the budget stopped the epoch, or before
        # the checkpoint this run resumed from at the epoch's end. The run's last evaluation is whole.
        evaluated = evaluator.evaluated_at == res.steps
        last = bool(res.stopped_by) or res.steps >= total or epoch == cfg.epochs - 1
        screened = evaluator.screens_epoch_end and not last
        stop = evaluator.stop or (not evaluated and _evaluate(evaluator, meter, recorder, res.steps, screened))
        if stop or res.stopped_by or res.steps >= total:
            break
    bar.close()
    return _finish(res, g, cfg, evaluator, ckpt, pos, nonfinite, meter, trained=res.steps - start.step)


def _evaluator(g: TrainingGraph, cfg: TrainConfig, ckpt: Checkpointer, start: Position, meter, samples,
               total: int) -> Evaluator:
    """The run's Evaluator, resumed where ``start`` left off; raises NothingToTrain when there is nothing to train."""
    evaluator = Evaluator(g, cfg, ckpt, g.ema, resumed=start.evaluation, clock=meter.run_clock, samples=samples)
    done = _nothing_to_train(ckpt, start, evaluator, cfg, total)
    if done is not None:
        raise done
    return evaluator


def _nothing_to_train(ckpt: Checkpointer, start: Position, evaluator: Evaluator, cfg: TrainConfig,
                      total: int) -> Optional[NothingToTrain]:
    """A resume with nothing to train: its run stopped itself there and these settings would stop it there
    again, its time budget is spent (resuming would train one more step each time), or it is at or past
    this run's end."""
    if evaluator.stop:
        return stopped_already(ckpt, start, evaluator)
    if cfg.time_budget_s and evaluator.clock.over_budget():
        return stopped_already(ckpt, start, evaluator, budget=cfg.time_budget_s)
    if start.step >= total or start.epoch >= cfg.epochs:
        return NothingToTrain.past_the_end(ckpt.latest, start, total)
    return None


def _evaluate(evaluator: Evaluator, meter, recorder, step: int, screened: bool = False) -> bool:
    """Evaluate at ``step``, outside the timing windows, and record it; True when training should stop."""
    meter.close_window()
    evaluator.run(step, screened)
    recorder.evaluation(step, evaluator.scalars)
    return evaluator.stop


def _epoch_end(res: LoopResult, synced: SyncedChecks, loss, norm, meter, epoch_start: float, recorder) -> None:
    """An epoch's end: the measurement window closed; when a step ran in it (not a resume at its very end),
    the host checks (an epoch shorter than a window still logs and checks), its time, the final loss."""
    meter.close_window()
    if loss is None:
        return
    synced(loss, norm)
    res.epoch_times_s.append(meter.clock() - epoch_start)
    res.final_loss = loss.item()
    recorder.scalars(res.steps, {"train/epoch_time_s": res.epoch_times_s[-1]})


def _so_far(stop, evaluator: Evaluator, steps: int):
    """A stopped run's record keeps what it learnt so far: the best evaluation and the target's curve."""
    stop.metrics.update(evaluator.outcome(steps, evaluator.samples(steps)))
    return stop


def _finish(res: LoopResult, g: TrainingGraph, cfg: TrainConfig, evaluator: Evaluator, ckpt: Checkpointer,
            pos: Optional[Position], nonfinite: NonfiniteSteps, meter, trained: int) -> LoopResult:
    """The run's end: what stopped it, its last checkpoint (written again when the evaluation that stopped
    it came after it), the clock stopped, and a run that learnt nothing failed."""
    res.val_metrics, res.val_metrics_raw, res.best = evaluator.latest, evaluator.raw, evaluator.best
    res.stopped_early, res.nonfinite_steps = evaluator.stopped_early, int(nonfinite.total.item())
    target = evaluator.target
    res.stopped_by = ("target" if target is not None and target.reached else res.stopped_by
                      or ("early_stop" if res.stopped_early else None))
    if res.stopped_by and pos is not None:  # the stop's evaluation and the clock after it, for a resume
        pos.evaluation = evaluator.state()
    ckpt.finish(g, pos, nonfinite.streak, always=res.stopped_by == "time_budget",
                again=res.stopped_by in ("target", "early_stop"))
    meter.run_clock.stop()
    res.target = target and target.record(res.steps, evaluator.samples(res.steps))
    if nonfinite.too_many(cfg, trained):
        ckpt.settle(g=g)  # the newest good checkpoint, once written, is the one the error names
        raise nonfinite.error(cfg, res.steps, ckpt.latest)
    return res


def stopped_already(ckpt: Checkpointer, start: Position, evaluator: Evaluator,
                    budget: Optional[float] = None) -> NothingToTrain:
    """The NothingToTrain of a resume whose checkpoint shows the run stopped itself (``evaluator.stop``), or
    spent its time budget (``budget``: train.time_budget_s; resuming would train one more step each time)."""
    target, best, why = evaluator.target, evaluator.best, "time_budget" if budget else evaluator.why_stopped()
    if why == "time_budget":
        said = f"train.time_budget_s={budget:g} spent ({evaluator.clock.elapsed():.1f} s of training)"
        further = "a larger train.time_budget_s (or none) trains further"
    elif why == "target":
        said, further = target.describe_reached(), "a harder train.target (or none) trains further"
    else:
        said = (f"early stopping: {evaluator.g.task.primary} gained nothing for {evaluator.since_best} evaluations "
                f"(best {best['value']:.4g} at step {best['step']})")
        further = "a larger train.early_stop_patience (or none) trains further"
    return NothingToTrain.stopped_there(ckpt.latest, start, said, further, {
        "stopped_by": why, "stopped_early": why == "early_stop", **evaluator.outcome(start.step, start.samples_seen)})


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
        which = "every evaluation but the last" if epoch_ends_screened(cfg) else "the periodic evaluations"
        screen = (f" ({which} screened on {cfg.target_eval_samples} held-out samples)"
                  if cfg.target_eval_samples else "")
        stop += f"  target {direction} {cfg.target:g}{screen}"
    if cfg.time_budget_s:
        stop += f"  time budget {cfg.time_budget_s:g} s"
    return (f"epochs={cfg.epochs}  steps/epoch={steps_per_epoch}  max_steps={cfg.max_steps}  "
            f"eval each epoch{every} on {samples} held-out samples{first}{overfit}{stop}")
