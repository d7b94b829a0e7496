"""``fastpipe.load(run_dir, which)``: a finished run's trained model back in your code.

    import fastpipe
    model = fastpipe.load("outputs/2026-11-30/10-00-00").model   # best.pt: the best evaluation's weights

The model is rebuilt from the run's own record (``.hydra/config.yaml``) and the weights file
(``checkpoints/best.pt`` or ``last.pt``), which also holds what the model took from the dataset
(``num_classes``, ``vocab_size``...), so the dataset itself is not needed. The project's modules
must be importable (run from its folder, or put it on PYTHONPATH).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from fastpipe.errors import ConfigError, DataError

WHICH = ("best", "last")


@dataclass
class Trained:
    """What ``load`` gives back: the model (eval mode, CPU unless ``device``), its run's settings
    (a fastpipe Config), the weights file and what it recorded (step, metric, ``ema`` or ``raw``)."""

    model: torch.nn.Module
    config: object
    path: Path
    step: int
    metric: Optional[dict]
    weights: str



def weights_path(run_dir: Path, which: str, option: str = "which='{}'") -> Path:
    """``run_dir``'s weights file ``which``; missing, a DataError that says why from the run's state (still
    running, stopped, finished without it). ``option``: how the caller spells the choice (``--weights {}``)."""
    if which not in WHICH:
        raise ConfigError(f"{option.format(which)}: use one of {', '.join(WHICH)}")
    path = Path(run_dir) / "checkpoints" / f"{which}.pt"
    if not path.is_file():
        raise DataError(f"{path} does not exist ({_why_missing(Path(run_dir), which, option)})")
    return path


def _why_missing(run_dir: Path, which: str, option: str) -> str:
    """Why a run has no ``which`` weights file, and what to load instead."""
    from fastpipe.record.results import outcome
    from fastpipe.record.runlock import holder

    other = "last" if which == "best" else "best"
    written = ("at the run's first evaluation with a new best" if which == "best" else "when the run ends")
    running = holder(run_dir)
    if running is not None:
        return (f"the run is still going ({running}): {which}.pt is written {written}; load it once the run has "
                f"{'evaluated' if which == 'best' else 'finished'}, or a step-*.pt checkpoint")
    record = outcome(run_dir) or {}
    status = record.get("status")
    if status in ("failed", "preempted", "interrupted"):
        ended = "its process died" if (record.get("reason") or "").startswith("its process died") else f"it ended {status}"
        return (f"the run did not finish ({ended}): {which}.pt is written {written}; resume the run with "
                f"train.resume=auto, or load a step-*.pt checkpoint")
    if which == "best":
        return f"the run had no held-out split, or train.save_weights=false; try {option.format(other)}"
    return "train.save_weights=false; load a step-*.pt checkpoint"


def load(run_dir, which: str = "best", device="cpu") -> Trained:
    """The model of the run in ``run_dir`` with its ``which`` weights (``best`` by the task's primary
    metric, or ``last``), in eval mode on ``device``."""
    from fastpipe.checkpoint.disk import load_state, verify
    from fastpipe.models import build_model
    from fastpipe.runtime import Dist, resolve_device

    if str(device).split(":")[0] == "cuda":  # asked for and absent: fastpipe's one line, not torch's driver error
        resolve_device("cuda", Dist())
    path = weights_path(Path(run_dir), which)
    problem = verify(path, need_sidecar=True)  # fastpipe wrote it with its sidecar: without one, nothing vouches for it
    if problem is not None:
        raise DataError(f"{path} cannot be trusted: {problem}; load the other weights (best or last), or a "
                        "step-*.pt checkpoint")
    try:  # verified once above (hashing a large file twice would double the load's time)
        state = load_state(path)
    except Exception:  # a pickle/zip error the sidecar could not catch
        state = None
    if state is None or state.get("format") != "weights":
        raise DataError(f"{path} is damaged or not a weights file (its SHA-256 or format does not match); "
                        "load the other one, or a step-*.pt checkpoint")
    from fastpipe.config.reload import run_settings

    settings = run_settings(Path(run_dir))
    model = build_model(settings.model, state["meta"].get("model_kwargs") or {})
    model.load_state_dict(state["model"])
    return Trained(model.to(device).eval(), settings, path, state["step"], state.get("metric"), state["weights"])
