"""``NothingToTrain``: a resume that finds its run already at its end. Not a failure: one line, exit
code 0, no training, and the finished record of the run that ended there stays."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from fastpipe.checkpoint.state import Position
from fastpipe.errors import FastpipeError


class NothingToTrain(FastpipeError):
    """A resumed run already at its end: one line, exit code 0, no training; the record of the run that
    ended there stays, when the folder holds it (``keeps``). ``finished``: the run had stopped itself
    there (its target, early stopping), which the record must show too."""

    exit_code = 0

    def __init__(self, message: str, metrics: dict, finished: bool = False) -> None:
        super().__init__(message)
        self.metrics, self.finished = metrics, finished

    @classmethod
    def past_the_end(cls, checkpoint: Optional[Path], pos: Position, total: int) -> "NothingToTrain":
        """A resume from ``checkpoint`` at or beyond this run's last step (``total``)."""
        return cls(f"the checkpoint {checkpoint} is at step {pos.step} ({pos.samples_seen} samples), at or past "
                   f"this run's end (step {total}): nothing to train; raise train.epochs or train.max_steps to "
                   "train further", metrics={"status": "ok", "steps": pos.step})

    @classmethod
    def stopped_there(cls, checkpoint: Optional[Path], pos: Position, why: str, further: str,
                      metrics: dict) -> "NothingToTrain":
        """A resume of a run that stopped itself (``why``: its target reached, early stopping) with settings
        that would stop it there again; ``further``: the setting that trains on. ``metrics``: what the
        checkpoint knows of that run's end (stopped_by, target, best), for a folder that lost its record."""
        return cls(f"the checkpoint {checkpoint} (step {pos.step}) shows {why}: nothing to train; {further}",
                   metrics={"status": "ok", "steps": pos.step, **metrics}, finished=True)

    @classmethod
    def finished_without_checkpoint(cls, run_dir: Path, is_main: bool) -> Optional["NothingToTrain"]:
        """``train.resume=auto`` in a folder whose run finished without leaving a step checkpoint
        (``train.checkpoint_every=0``, the default), or None: nothing to resume from, and training again
        from step 0 would replace that run's weights and record. Rank 0 (``is_main``) reads the folder's
        record, the one before this launch's ``running`` one, and tells the other ranks."""
        from fastpipe.record import results
        from fastpipe.process_group import broadcast_from_main

        earlier = None
        if is_main:
            earlier = results.read(run_dir)
            if earlier is not None and earlier.get("status") == "running":  # this launch's: the run before it
                earlier = results.read(run_dir, results.PREVIOUS)
        earlier = broadcast_from_main(earlier)
        if not earlier or earlier.get("status") != "ok":
            return None
        return cls(f"train.resume=auto: {run_dir} holds a finished run ({earlier.get('steps')} steps, status ok) "
                   "and no step checkpoint to resume from (train.checkpoint_every=0 writes none): nothing to train, "
                   "its weights and metrics.json stay; to train it longer, run again with train.checkpoint_every > 0 "
                   "in a new hydra.run.dir", metrics={"status": "ok", "steps": earlier.get("steps")})

    def keeps(self, earlier: Optional[dict]) -> bool:
        """True when ``earlier`` (the run folder's record before this launch) is the finished record of
        the run that ended at this checkpoint: ok at the same steps (the same command run again, a Slurm
        requeue), and for a run that stopped itself, the same stop and target."""
        if not earlier or earlier.get("status") != "ok" or earlier.get("steps") != self.metrics["steps"]:
            return False
        if not self.finished:  # at or past the run's end
            return True
        ours, theirs = self.metrics.get("target") or {}, earlier.get("target") or {}
        return (earlier.get("stopped_by") == self.metrics["stopped_by"]
                and theirs.get("value") == ours.get("value") and theirs.get("steps") == ours.get("steps"))
