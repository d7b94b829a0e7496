"""Checkpoint and resume: what the loop calls. Saves every ``train.checkpoint_every`` steps and on a
stop signal; ``train.resume`` (auto | PATH) continues exactly where a run stopped.

A checkpoint holds the model, optimizer, GradScaler, every rank's RNG states (Python, NumPy, torch
CPU, CUDA) and the loop position (epoch, optimizer steps into it, global step). The loader position
follows from it: loaders fix each epoch's order by ``set_epoch`` and ``epoch_batches`` skips the
batches already trained on, so a resumed run sees the batches an uninterrupted one would. Files and
their integrity checks live in checkpoint_files.py; only rank 0 writes.
"""
from __future__ import annotations

import random
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, List, Optional

import numpy as np
import torch

from fastpipe import signals
from fastpipe.checkpoint_files import (
    checkpoints_in,
    load_verified,
    resolve_candidates,
    rotate,
    verify,
    write_checkpoint,
)
from fastpipe.config import TrainConfig
from fastpipe.errors import ConfigError, DataError, Preempted


@dataclass
class Position:
    """Where the loop is: after ``step`` optimizer steps, ``step_in_epoch`` of them in ``epoch``."""

    epoch: int = 0
    step_in_epoch: int = 0
    step: int = 0
    nonfinite_steps: Any = 0  # a count, or the loop's device tensor (read only when saving)
    final_loss: Any = None  # likewise a float or a 0-d tensor


def epoch_batches(loader, epoch: int, skip_batches: int):
    """An iterator over ``epoch`` of ``loader`` that starts ``skip_batches`` batches in."""
    loader.set_epoch(epoch)
    if skip_batches and getattr(loader, "skip_next", lambda n: False)(skip_batches):
        return iter(loader)  # the sampler leaves them out unread
    batches = iter(loader)
    for _ in range(skip_batches):  # a loader that cannot skip: read and drop (same order by set_epoch)
        next(batches)
    return batches


def rng_state(device: torch.device) -> dict:
    """Python, NumPy, torch CPU and CUDA generator states, as plain types (loadable weights_only)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    return {"python": random.getstate(), "numpy": [kind, keys.tolist(), pos, has_gauss, gauss],
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}


def set_rng_state(state: dict, device: torch.device) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and state.get("cuda") is not None:
        torch.cuda.set_rng_state(state["cuda"], device)


class Checkpointer:
    """The loop's checkpoint policy: ``restore`` first, ``after_step`` each step, ``finish`` at the end."""

    def __init__(self, cfg: TrainConfig, run_dir: Optional[Path] = None, dist=None) -> None:
        from fastpipe.runtime import Dist

        self.folder = None if run_dir is None else Path(run_dir) / "checkpoints"
        self.every, self.keep, self.resume = cfg.checkpoint_every or 0, cfg.keep_checkpoints, cfg.resume
        self.dist = dist or Dist()
        self.latest: Optional[Path] = None  # the newest good checkpoint: written, or resumed from
        self.last_step: Optional[int] = None
        self.pending = False  # a save fell in a non-finite streak: retry at the next good step
        self.stopped_by: Optional[str] = None
        self.steps_per_epoch = 0

    def log(self, text: str, warnings: Optional[List[str]] = None) -> None:
        if self.dist.is_main:
            print(f"fastpipe: {text}", file=sys.stderr, flush=True)
            if warnings is not None:
                warnings.append(text)

    def restore(self, g, steps_per_epoch: int, warnings: List[str]) -> Position:
        """Load the checkpoint ``train.resume`` names (newest good one first); else step 0."""
        self.steps_per_epoch = steps_per_epoch
        if self.folder is None:
            return Position()
        if not self.resume:
            if any(verify(p) is None for p in checkpoints_in(self.folder)):
                raise ConfigError(f"{self.folder} holds checkpoints of an earlier run: add train.resume=auto to "
                                  "continue it, or give this run its own hydra.run.dir")
            return Position()
        candidates = resolve_candidates(self.resume, self.folder)
        path, state = load_verified(candidates, lambda text: self.log(text, warnings))
        if path is None:
            if self.resume != "auto":
                raise DataError(f"train.resume={self.resume}: no complete, loadable checkpoint there (see above)")
            self.log(f"no complete checkpoint in {self.folder}: starting at step 0",
                     warnings if candidates else None)
            return Position()
        pos = apply_state(g, state, steps_per_epoch, warnings)
        self.latest, self.last_step = path, pos.step
        self.log(f"resuming from {path} at step {pos.step} (epoch {pos.epoch + 1}, step {pos.step_in_epoch} "
                 f"of {steps_per_epoch}); timings cover the steps after it only", warnings)
        return pos

    def after_step(self, g, pos: Position, streak: torch.Tensor, edge: bool) -> bool:
        """Save when due; True when a stop signal ends training now (``preempted()`` says how)."""
        stop = self._stop_requested(g, edge)
        if stop or self.pending or (self.every and pos.step % self.every == 0):
            self.pending = self.save(g, pos, streak) is None and not stop and self.folder is not None
        return stop

    def finish(self, g, pos: Optional[Position], streak: torch.Tensor) -> None:
        """The final checkpoint, when checkpointing is on and the last step has none yet."""
        if self.every and pos is not None and pos.step != self.last_step:
            self.save(g, pos, streak)

    def save(self, g, pos: Position, streak: Optional[torch.Tensor] = None) -> Optional[Path]:
        """Write a checkpoint (rank 0; every rank takes part); None when not written."""
        if self.folder is None:
            return None
        if streak is not None and g.all_reduce_sum(streak.detach().clone()).item() > 0:
            return None  # non-finite now: BatchNorm buffers may hold NaN; keep the last good checkpoint
        rngs = g.gather(rng_state(g.device))
        path = self.folder / f"step-{pos.step:08d}.pt"
        if self.dist.is_main:
            path = write_checkpoint(self.folder, state_of(g, pos, self.steps_per_epoch, rngs))
            rotate(self.folder, self.keep)
        if self.dist.world_size > 1:
            g.all_reduce_sum(torch.zeros(1, device=g.device))  # a barrier: no rank leaves mid-write
        self.latest, self.last_step = path, pos.step
        return path

    def preempted(self, pos: Position) -> Preempted:
        """The error that ends a signalled run (exit code EXIT_PREEMPTED)."""
        if self.last_step == pos.step:
            saved = f"checkpoint {self.latest} written"
        else:
            saved = f"no checkpoint written at a non-finite step; the last good one is {self.latest}"
        run_dir = self.folder.parent if self.folder is not None else "the same run folder"
        return Preempted(f"stopped by {self.stopped_by} at step {pos.step}: {saved}; continue with "
                         f"train.resume=auto hydra.run.dir={run_dir}",
                         metrics={"status": "preempted", "steps": pos.step,
                                  "checkpoint": None if self.latest is None else str(self.latest)})

    def _stop_requested(self, g, edge: bool) -> bool:
        name = signals.received()
        if self.dist.world_size > 1:  # every rank must stop at the same step: agree at window edges
            if not edge:
                return False
            if g.all_reduce_sum(torch.tensor([float(name is not None)], device=g.device)).item() == 0:
                return False
            name = name or "a stop signal to another rank"
        elif name is None:
            return False
        self.stopped_by = name
        return True


def state_of(g, pos: Position, steps_per_epoch: int, rngs: list) -> dict:
    """Everything a resumed run needs, as plain types and CPU-loadable tensors."""
    position = asdict(pos)
    position["nonfinite_steps"] = int(pos.nonfinite_steps)
    position["final_loss"] = None if pos.final_loss is None else float(pos.final_loss)
    s = g.settings
    return {"format": 1, "position": position, "model": g.model.state_dict(),
            "optimizer": g.optimizer.state_dict(), "scaler": g.precision.scaler.state_dict(), "rng": rngs,
            "meta": {"steps_per_epoch": steps_per_epoch, "batch_size": s.train.batch_size,
                     "grad_accum": s.train.grad_accum, "world_size": g.runtime.dist.world_size, "seed": s.seed}}


def apply_state(g, state: dict, steps_per_epoch: int, warnings: List[str]) -> Position:
    """Load ``state`` into the graph and this process's RNGs; returns the loop position."""
    g.model.load_state_dict(state["model"])
    g.optimizer.load_state_dict(state["optimizer"])
    if g.precision.scaler.is_enabled() and state.get("scaler"):
        g.precision.scaler.load_state_dict(state["scaler"])
    dist, meta, rngs = g.runtime.dist, state.get("meta", {}), state.get("rng") or []
    if len(rngs) == dist.world_size:
        set_rng_state(rngs[dist.rank], g.device)
    elif dist.is_main:
        warnings.append(f"the checkpoint has RNG states of {len(rngs)} process(es), this run "
                        f"{dist.world_size}: random streams restart from the seed")
    if (meta.get("steps_per_epoch"), meta.get("world_size")) != (steps_per_epoch, dist.world_size) and dist.is_main:
        warnings.append(f"the checkpoint was written with {meta.get('steps_per_epoch')} steps/epoch on "
                        f"{meta.get('world_size')} process(es), this run has {steps_per_epoch} on "
                        f"{dist.world_size}: its data position is approximate")
    return Position(**state["position"])
