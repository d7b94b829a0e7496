"""What the loop reads on the host, only where the host is synced anyway (a measurement window's edge,
an evaluation, an epoch's end): the loss and gradient norm it logs, the non-finite streak, the time
budget. Between those points the non-finite bookkeeping stays on the device: no per-step host sync."""
from __future__ import annotations

import torch

from fastpipe.config import TrainConfig
from fastpipe.stages.optim import current_lr, nonfinite_error


class NonfiniteSteps:
    """Device counters of skipped (non-finite) steps: the current streak, the longest, the total."""

    def __init__(self, device: torch.device, total_before: int = 0) -> None:
        """``total_before``: the steps a resumed run had skipped before its checkpoint."""
        self.streak = torch.zeros((), device=device)
        self.worst = torch.zeros((), device=device)
        self.total = torch.full((), float(total_before), device=device)

    def add(self, skipped: torch.Tensor) -> None:
        """Count one step (``skipped``: its 0-d bool); on the device."""
        self.streak = (self.streak + 1) * skipped
        self.worst = torch.maximum(self.worst, self.streak)
        self.total += skipped  # in place: the loop's Position holds this tensor

    def too_many(self, cfg: TrainConfig, trained: int = 0) -> bool:
        """A host read: the longest streak reached ``train.max_nonfinite_steps``, or every one of the
        ``trained`` steps was skipped (a run shorter than the limit that learnt nothing)."""
        worst = self.worst.item()
        return worst >= cfg.max_nonfinite_steps or bool(trained and worst >= trained)

    def error(self, cfg: TrainConfig, steps: int, checkpoint):
        """The TrainingError that stops the run at ``steps`` (``checkpoint``: the last good one)."""
        return nonfinite_error(self.worst, self.total, steps, cfg, checkpoint)


class SyncedChecks:
    """Called where the host is synced, at most once per step: logs the loss, gradient norm, learning rate
    and the window's numbers, fails a run stuck on non-finite steps, and notes a time budget's end
    (``result.stopped_by``), agreed by every rank at the same step."""

    def __init__(self, g, cfg: TrainConfig, meter, recorder, ckpt, result, bar, nonfinite: NonfiniteSteps,
                 total: int) -> None:
        self.g, self.cfg, self.meter, self.recorder, self.ckpt = g, cfg, meter, recorder, ckpt
        self.result, self.bar, self.nonfinite, self.total = result, bar, nonfinite, total

    def after_step(self, edge: bool, loss: torch.Tensor, norm) -> None:
        """After each step: at a window edge (the host is synced: reading is free) every check; between
        edges one process alone reads its host clock for the time budget (no device sync), so a window
        longer than the run does not put it off; several processes agree at the synced steps."""
        if edge:
            self(loss, norm)
        elif (self.cfg.time_budget_s and self.g.runtime.dist.world_size == 1 and self.result.steps < self.total
              and self.meter.run_clock.over_budget()):
            self.result.stopped_by = "time_budget"

    def __call__(self, loss: torch.Tensor, norm) -> None:
        res = self.result
        if res.loss_history and res.loss_history[-1][0] == res.steps:
            return
        res.final_loss = loss.item()
        res.grad_norm = None if norm is None else norm.item()
        res.loss_history.append((res.steps, res.final_loss))
        self.recorder.scalars(res.steps, {"train/loss": res.final_loss, "train/grad_norm": res.grad_norm,
                                          "train/lr": current_lr(self.g.optimizer),
                                          **self.meter.last_window_scalars()})
        self.bar.set_postfix(loss=f"{res.final_loss:.4f}", **self.meter.postfix())
        if self.nonfinite.too_many(self.cfg):
            self.ckpt.settle(g=self.g)
            raise self.nonfinite.error(self.cfg, res.steps, self.ckpt.latest)
        if self.cfg.time_budget_s and res.steps < self.total and self.g.runtime.dist.any_rank(
                torch.tensor(self.meter.run_clock.over_budget(), device=self.g.device)):
            res.stopped_by = "time_budget"  # every rank agrees, at the same step; a finished run is not stopped
