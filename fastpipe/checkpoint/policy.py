"""Checkpoint and resume: what the loop calls. Saves every ``train.checkpoint_every`` steps and on a
stop signal; ``train.resume`` (auto | PATH) continues exactly where a run stopped.

A checkpoint holds the model, optimizer, GradScaler, every rank's RNG states and the loop position
(state.py). The loader position follows from it: loaders fix each epoch's order by
``set_epoch`` and ``epoch_batches`` skips the batches already trained on, so a resumed run sees the
batches an uninterrupted one would. A checkpoint is written only from finite weights, so the
newest one is always a good one. Files and their integrity checks live in files.py;
rank 0 writes, except under launcher=fsdp, where every rank writes its shards (dcp.py).
Rank 0 chooses the checkpoint to resume, so every rank resumes the same one.
"""
from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path
from typing import Callable, List, Optional

import torch

from fastpipe import signals
from fastpipe.checkpoint.dcp import save_step
from fastpipe.checkpoint.disk import (
    checkpoints_in,
    load_state,
    load_verified,
    resolve_candidates,
    verify,
)
from fastpipe.checkpoint.state import (Position, RunFacts, apply_state, rng_state, state_of, train_state_of,
                                       weights_of)
from fastpipe.checkpoint.nothing_to_train import NothingToTrain
from fastpipe.checkpoint.background import BackgroundWriter
from fastpipe.config import TrainConfig
from fastpipe.errors import ConfigError, DataError, FastpipeWarning, Preempted


class Checkpointer:
    """The loop's checkpoint policy: ``restore`` first, ``after_step`` each step, ``finish`` at the end."""

    def __init__(self, cfg: TrainConfig, run_dir: Optional[Path] = None, dist=None,
                 facts: Optional[RunFacts] = None, clock=None,
                 on_written: Optional[Callable[[int, Path], None]] = None) -> None:
        """``clock``: the run's RunClock (checkpoint time counted apart); ``on_written(step, path)``: called
        (from the writer's thread) when a checkpoint is complete."""
        from fastpipe.measure.clock import RunClock
        from fastpipe.runtime import Dist

        self.cfg, self.facts = cfg, facts or RunFacts()  # the facts checkpoints and weights files record
        self.folder = None if run_dir is None else Path(run_dir) / "checkpoints"
        self.every, self.keep, self.resume = cfg.checkpoint_every or 0, cfg.keep_checkpoints, cfg.resume
        self.dist = dist or Dist()
        # Rank 0 writes in the background (writer.py); the newest good checkpoint is the
        # newest complete write, or the one resumed from.
        self.writer = BackgroundWriter(self.folder, self.keep, on_written) if self.folder is not None and self.dist.is_main \
            else None
        self._latest: Optional[Path] = None
        self.stalls: List[float] = []  # seconds the training thread spent in each save
        self.last_step: Optional[int] = None
        self.pending = False  # a save fell in a non-finite streak: retry at the next good step
        self.stopped_by: Optional[str] = None
        self.steps_per_epoch = 0
        self.position: Optional[Position] = None  # the loop's latest, for an interrupted run's record
        self.clock = clock or RunClock()  # the run's clock: saves, waits and weights files are its checkpoint part
        self._weights: Optional[tuple] = None  # (step, host copy) of the newest weights file written

    @property
    def latest(self) -> Optional[Path]:
        """The newest complete, good checkpoint (a write still in flight is not one yet)."""
        written = self.writer.written if self.writer is not None else None
        return written or self._latest

    def settle(self, barrier: bool = True, g=None) -> None:
        """Wait for the checkpoint write in flight (rank 0), then, under DDP, for every rank: no rank
        leaves while rank 0 still writes. ``barrier=False`` where only some ranks get here (a crash)."""
        with self.clock.part("checkpoint"):
            if self.writer is not None:
                self.writer.wait()
            if barrier and g is not None and self.dist.world_size > 1:
                g.runtime.dist.all_reduce_sum(torch.zeros(1, device=g.device))

    def stall_summary(self) -> Optional[dict]:
        """metrics.json's ``checkpoint_stall_s``: the training thread's stall per checkpoint."""
        if not self.stalls:
            return None
        ordered = sorted(self.stalls)
        writes = sorted(self.writer.write_s) if self.writer is not None and self.writer.write_s else None
        return {"median": ordered[len(ordered) // 2], "max": ordered[-1], "count": len(ordered),
                "write_median": writes[len(writes) // 2] if writes else None}

    def log(self, text: str, warn: bool = False) -> None:
        """Say ``text`` (rank 0), and with ``warn`` also record it among the run's warnings."""
        if self.dist.is_main:
            print(f"fastpipe: {text}", file=sys.stderr, flush=True)
            if warn:
                warnings.warn(text, FastpipeWarning)

    def restore(self, g, cfg: TrainConfig, steps_per_epoch: int) -> Position:
        """Load the checkpoint ``train.resume`` names (newest good one first); else step 0. ``cfg``: the
        run's TrainConfig as it trains (``train.batch_size=auto`` resolved), which its checkpoints record."""
        self.cfg, self.steps_per_epoch = cfg, steps_per_epoch
        if self.folder is None:
            return Position()
        if not self.resume:
            if any(verify(p) is None for p in checkpoints_in(self.folder)):
                raise ConfigError(f"{self.folder} holds checkpoints of an earlier run: add train.resume=auto to "
                                  "continue it, or give this run its own hydra.run.dir")
            return Position()
        candidates = resolve_candidates(self.resume, self.folder)
        path, state = self._choose(candidates)
        if path is None:
            if self.resume != "auto":
                raise DataError(f"train.resume={self.resume}: no complete, loadable checkpoint there (see above)")
            finished = NothingToTrain.finished_without_checkpoint(self.folder.parent, self.dist.is_main)
            if finished is not None:
                raise finished
            self.log(f"no complete checkpoint in {self.folder}: starting at step 0", warn=bool(candidates))
            return Position()
        pos = apply_state(g, path, state, steps_per_epoch, cfg, self.facts)
        self._latest, self.last_step, self.position = path, pos.step, pos
        self.log(f"resuming from {path} at step {pos.step} (epoch {pos.epoch + 1}, step {pos.step_in_epoch} "
                 f"of {steps_per_epoch}); timings cover the steps after it only", warn=True)
        return pos

    def _choose(self, candidates: List[Path]) -> tuple:
        """(path, state) of the newest good candidate: verified by rank 0 (every SHA-256 read once),
        which tells the other ranks which one to load."""
        from fastpipe.process_group import broadcast_from_main

        if self.dist.world_size == 1:
            return load_verified(candidates, lambda text: self.log(text, warn=True))
        path, state = None, None
        if self.dist.is_main:
            try:
                path, state = load_verified(candidates, lambda text: self.log(text, warn=True))
            except BaseException as exc:  # the other ranks wait in the broadcast: tell them, then fail
                broadcast_from_main({"failed": f"{type(exc).__name__}: {exc}"})
                raise
        chosen = broadcast_from_main(None if path is None else str(path))
        if isinstance(chosen, dict):
            raise DataError(f"rank 0 could not choose a checkpoint to resume from ({chosen['failed']}); its own "
                            "error says why")
        if chosen is None or self.dist.is_main:
            return path, state
        return Path(chosen), load_state(Path(chosen))

    def after_step(self, g, pos: Position, streak: torch.Tensor, agree: bool) -> bool:
        """Save when due; True when a stop signal ends training now (``preempted()`` says how). ``agree``:
        a step where the ranks of a multi-process run agree on a stop signal (the same on every rank)."""
        self.position = pos
        stop = self._stop_requested(g, agree)
        if stop or self.pending or (self.every and pos.step % self.every == 0):
            self.pending = self.save(g, pos, streak) is None and not stop and self.folder is not None
        return stop

    def finish(self, g, pos: Optional[Position], streak: torch.Tensor, always: bool = False,
               again: bool = False) -> None:
        """The final checkpoint, when checkpointing is on (or ``always``: a time-budget stop, to resume
        from) and the last step has none yet (or ``again``: the one it has predates the evaluation that
        stopped the run). Its write, and a best.pt still being written, go on while the run writes
        last.pt and counts its FLOPs: the run settles before it reports (job/training.py)."""
        if (self.every or always) and pos is not None and (pos.step != self.last_step or always or again):
            self.save(g, pos, streak)

    def save(self, g, pos: Position, streak: Optional[torch.Tensor] = None) -> Optional[Path]:
        """Start a checkpoint (every rank takes part; rank 0 snapshots and writes in the background);
        None when not written. The check for finite weights is this save's one host synchronisation."""
        if self.folder is None:
            return None
        with self.clock.part("checkpoint"):
            return self._save(g, pos, streak)

    def _save(self, g, pos: Position, streak: Optional[torch.Tensor]) -> Optional[Path]:
        start = time.perf_counter()
        bad = streak.detach().clone().float() if streak is not None else torch.zeros((), device=g.device)
        bad = bad + (~finite_state(g.model)).float()  # the loss was finite but the update may not have been
        if g.runtime.dist.all_reduce_sum(bad.reshape(1)).item() > 0:
            self.settle(barrier=False)
            self.log(f"no checkpoint at step {pos.step}: the weights or buffers hold NaN/inf; the newest good one "
                     f"stays {self.latest}")
            return None
        rngs = g.runtime.dist.gather(rng_state(g.device))
        if g.sharded:  # every rank writes its shards now; rank 0 publishes the folder in the background
            path = save_step(g, self.folder, pos.step, self.writer,
                             train_state_of(g, pos, self.steps_per_epoch, rngs, self.cfg, self.facts))
        else:
            path = self.folder / f"step-{pos.step:08d}.pt"
            if self.writer is not None:
                self.writer.submit(state_of(g, pos, self.steps_per_epoch, rngs, self.cfg, self.facts))
        if self.writer is None:
            self._latest = path  # other ranks: rank 0 writes (or publishes) it
        self.last_step = pos.step
        self.stalls.append(time.perf_counter() - start)
        return path

    def save_weights(self, g, which: str, step: int, ema=None, metric: Optional[dict] = None) -> Optional[Path]:
        """``checkpoints/best.pt`` or ``last.pt``: the weights that count (the EMA's when there is one, the
        raw ones beside them), for fastpipe.load and python -m fastpipe.evaluate; never rotated. Rank 0
        snapshots them and writes in the background, as it writes step checkpoints (``settle`` waits for
        it); under FSDP every rank takes part in gathering the whole weights. Returns the file's path."""
        if self.folder is None or not self.cfg.save_weights:
            return None
        if not self.dist.is_main and not g.sharded:
            return None
        with self.clock.part("checkpoint"):
            path = self.folder / f"{which}.pt" if self.writer is not None else None  # rank 0 writes
            if self._weights is not None and self._weights[0] == step:  # last.pt at the best.pt just written:
                if path is not None:  # its host copy again (every rank alike: no FSDP gather alone)
                    self.writer.submit_again({**self._weights[1], "which": which, "metric": metric}, which)
                return path
            weights = weights_of(g, which, step, self.facts, ema, metric)
            host = path and self.writer.submit(weights, name=which, copy=not g.sharded)  # FSDP's gathered: its own
            self._weights = (step, host)
            return path

    def preempted(self, pos: Position, g=None) -> Preempted:
        """The error that ends a signalled run (exit code EXIT_PREEMPTED), once its checkpoint is written."""
        self.settle(g=g)
        if self.last_step == pos.step:
            saved = f"checkpoint {self.latest} written"
        else:
            saved = f"no checkpoint written at a non-finite step; the last good one is {self.latest}"
        run_dir = self.folder.parent if self.folder is not None else "the same run folder"
        return Preempted(f"stopped by {self.stopped_by} at step {pos.step}: {saved}; continue with "
                         f"train.resume=auto hydra.run.dir={run_dir}",
                         metrics={"status": "preempted", "steps": pos.step,
                                  "checkpoint": None if self.latest is None else str(self.latest)})

    def _stop_requested(self, g, agree: bool) -> bool:
        name = signals.received()
        if self.dist.world_size > 1:  # every rank must stop at the same step: agree where the loop says
            if not agree:
                return False
            if g.runtime.dist.all_reduce_sum(torch.tensor([float(name is not None)], device=g.device)).item() == 0:
                return False
            name = name or "a stop signal to another rank"
        elif name is None:
            return False
        self.stopped_by = name
        return True


def finite_state(model: torch.nn.Module) -> torch.Tensor:
    """True (a 0-d device tensor) when every parameter and floating buffer is finite (this rank's shard
    of each under FSDP: the caller sums the verdicts over the ranks)."""
    tensors = [t.to_local() if hasattr(t, "to_local") else t for t in list(model.parameters()) + list(model.buffers())]
    checks = [torch.isfinite(t).all() for t in tensors if t.is_floating_point() and t.numel()]
    return torch.stack(checks).all() if checks else torch.ones((), dtype=torch.bool)
