"""What a checkpoint holds and how a run takes it back: model, optimizer, scaler, RNG states, position.

The position is kept in samples as well as steps (as large-scale trainers keep it), so a resume
with another batch size, gradient accumulation or number of processes goes on from the same point
in the data (the samples of the epoch already trained on are left out) and in the schedule (the
same share of the run), instead of from a step count that means something else now.
"""
from __future__ import annotations

import random
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from fastpipe.config import TrainConfig
from fastpipe.errors import DataError, FastpipeWarning

FORMAT = 2  # 2: positions in samples too (format 1 files still load)


@dataclass
class Position:
    """Where the loop is: after ``step`` optimizer steps, ``step_in_epoch`` of them in ``epoch``."""

    epoch: int = 0
    step_in_epoch: int = 0
    step: int = 0
    nonfinite_steps: Any = 0  # a count, or the loop's device tensor (read only when saving)
    final_loss: Any = None  # likewise a float or a 0-d tensor
    samples_in_epoch: int = 0  # samples of this epoch trained on, over all processes
    samples_seen: int = 0  # samples trained on since step 0, over all processes
    evaluation: Optional[dict] = None  # the Evaluator's best result and patience count, so a resume keeps them


@dataclass(frozen=True)
class RunFacts:
    """What checkpoints and weights files record of the run that wrote them (and a resume names when
    they do not fit): the model, dataset and task it trains, and its seed."""

    model: str = ""  # model._target_
    dataset: str = ""  # the dataset's choice (or its callable's name)
    task: str = ""  # task._target_
    seed: int = 0

    @classmethod
    def of(cls, settings) -> "RunFacts":
        """From a run's Config."""
        return cls(settings.model.target, settings.choices.get("dataset", settings.dataset.short_name),
                   settings.task.target, settings.seed)


def global_batch(cfg: TrainConfig, world_size: int) -> int:
    """Samples one optimizer step takes, over all processes."""
    return cfg.batch_size * cfg.grad_accum * world_size


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


def train_state_of(g, pos: Position, steps_per_epoch: int, rngs: list, cfg: TrainConfig, facts: RunFacts) -> dict:
    """Everything a resumed run needs besides the model and optimizer, as plain types."""
    position = asdict(pos)
    position["nonfinite_steps"] = int(pos.nonfinite_steps)
    position["final_loss"] = None if pos.final_loss is None else float(pos.final_loss)
    return {"format": FORMAT, "position": position, "scaler": g.precision.scaler.state_dict(), "rng": rngs,
            "schedule": g.schedule.state_dict() if g.schedule is not None else None,
            "meta": {"steps_per_epoch": steps_per_epoch, "batch_size": cfg.batch_size,
                     "grad_accum": cfg.grad_accum, "world_size": g.runtime.dist.world_size, "seed": facts.seed,
                     "model": facts.model, "dataset": facts.dataset, "train_samples": train_samples(g),
                     "model_kwargs": g.dataset.model_kwargs(), "task": facts.task}}


def train_samples(g) -> Optional[int]:
    """The training split's samples (None where it has no length): a resume must go on in the same data."""
    split = g.dataset.train
    return len(split) if hasattr(split, "__len__") else None


def state_of(g, pos: Position, steps_per_epoch: int, rngs: list, cfg: TrainConfig, facts: RunFacts) -> dict:
    """A whole checkpoint (one file): the train state, the model, the optimizer and the EMA."""
    return {**train_state_of(g, pos, steps_per_epoch, rngs, cfg, facts), "model": g.model.state_dict(),
            "optimizer": g.optimizer.state_dict(), "ema": g.ema.state_dict() if g.ema is not None else None}


def whole_model_state(g) -> dict:
    """The model's state dict with whole tensors; under FSDP gathered from every rank (all ranks call
    this; rank 0 gets the tensors, in host memory, the others an empty dict)."""
    if not g.sharded:
        return g.model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(g.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def weights_of(g, which: str, step: int, facts: RunFacts, ema=None, metric=None) -> dict:
    """A weights file (best.pt / last.pt): what rebuilds the trained model without its dataset."""
    counted = ema.module.state_dict() if ema is not None else whole_model_state(g)
    return {"format": "weights", "which": which, "step": step, "metric": metric,
            "model": counted, "raw_model": g.model.state_dict() if ema is not None else None,
            "weights": "ema" if ema is not None else "raw",
            "meta": {"model": facts.model, "model_kwargs": g.dataset.model_kwargs(),
                     "dataset": facts.dataset, "task": facts.task}}


def _examples(keys) -> str:
    keys = sorted(keys)
    return ", ".join(repr(k) for k in keys[:3]) + (" ..." if len(keys) > 3 else "")


def load_model_state(g, path: Path, state: dict, facts: RunFacts) -> None:
    """The checkpoint's weights into the model; one clear line when they are not this model's."""
    if not isinstance(state, dict) or "model" not in state or "position" not in state:
        keys = list(state)[:3] if isinstance(state, dict) else []
        raise DataError(f"{path} is not a fastpipe checkpoint (it holds {type(state).__name__}"
                        + (f" with keys {_examples(keys)}" if keys else "") + "); train.resume takes a checkpoints/"
                        "step-*.pt file of a fastpipe run, or its run folder")
    own, theirs = g.model.state_dict(), state["model"]
    missing, unexpected = set(own) - set(theirs), set(theirs) - set(own)
    shapes = [k for k in set(own) & set(theirs) if tuple(own[k].shape) != tuple(theirs[k].shape)]
    if missing or unexpected or shapes:
        meta = state.get("meta", {})
        was = f" (written by model {meta['model']} on dataset {meta.get('dataset')})" if meta.get("model") else ""
        what = [f"{len(missing)} of this model's tensors are missing ({_examples(missing)})"] if missing else []
        what += [f"{len(unexpected)} are not this model's ({_examples(unexpected)})"] if unexpected else []
        what += [f"{k} is {list(theirs[k].shape)} there, {list(own[k].shape)} here" for k in sorted(shapes)[:2]]
        raise DataError(f"checkpoint {path}{was} does not fit this run's model {facts.model}: "
                        f"{'; '.join(what)}; resume a checkpoint of the same model and dataset (classes, "
                        "vocabulary), or start without train.resume")
    g.model.load_state_dict(theirs)


def load_optimizer_state(g, path: Path, saved: dict, cfg: TrainConfig) -> None:
    """The optimizer's state, refused in one line when its parameter groups are not this run's (a
    checkpoint from before ``train.no_decay=auto`` split AdamW's groups, or another no_decay)."""
    theirs, ours = len(saved.get("param_groups", [])), len(g.optimizer.param_groups)
    if theirs != ours:
        raise DataError(f"{path}: its optimizer state has {theirs} parameter group(s), this run's optimizer {ours} "
                        f"(train.no_decay={cfg.no_decay} decides whether biases and norm weights get a "
                        "group of their own): resume with the train.no_decay the checkpoint was written with "
                        "(train.no_decay=false: one group), or start a new run")
    g.optimizer.load_state_dict(saved)
    _match_parameter_layouts(g.optimizer)


def _match_parameter_layouts(optimizer: torch.optim.Optimizer) -> None:
    """Give each state tensor its parameter's strides: torch's load_state_dict keeps the file's, and CUDA's
    fused optimizers (fastpipe's default) refuse a momentum or moment buffer laid out otherwise than its
    parameter (a channels_last model resumed from a checkpoint with contiguous buffers)."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            state = optimizer.state.get(param, {})
            for key, value in state.items():
                if (type(value) is torch.Tensor and type(param.data) is torch.Tensor and value.shape == param.shape
                        and value.stride() != param.stride()):
                    state[key] = torch.empty_like(param, dtype=value.dtype).copy_(value)


def apply_state(g, path: Path, state: dict, steps_per_epoch: int, cfg: TrainConfig, facts: RunFacts) -> Position:
    """Load ``state`` (and, for a sharded checkpoint, its shards) into the graph and this process's RNGs;
    returns this run's position (in ``cfg``'s steps)."""
    if path.is_dir():
        from fastpipe.checkpoint.dcp import load_sharded

        load_sharded(g, path, facts.model)
    elif g.sharded:
        raise DataError(f"{path} is a whole-model checkpoint (written by launcher=single or ddp); launcher=fsdp "
                        "resumes sharded ones (step-*.dcp folders): resume it with the launcher that wrote it")
    else:
        load_model_state(g, path, state, facts)
        load_optimizer_state(g, path, state["optimizer"], cfg)
    if g.precision.scaler.is_enabled() and state.get("scaler"):
        g.precision.scaler.load_state_dict(state["scaler"])
    if g.ema is not None and state.get("ema"):
        g.ema.load_state_dict(state["ema"])
    elif g.ema is not None and g.runtime.dist.is_main:
        warnings.warn("the checkpoint has no EMA of the weights (written without train.ema_decay): the average "
                      "starts from the resumed weights", FastpipeWarning)
    dist, rngs = g.runtime.dist, state.get("rng") or []
    if len(rngs) == dist.world_size:
        set_rng_state(rngs[dist.rank], g.device)
    elif dist.is_main:
        warnings.warn(f"the checkpoint has RNG states of {len(rngs)} process(es), this run "
                      f"{dist.world_size}: random streams restart from the seed", FastpipeWarning)
    check_same_data(g, path, state, steps_per_epoch, cfg)
    pos = position_here(g, state, steps_per_epoch, cfg)
    if g.schedule is not None:
        g.schedule.resume(state.get("schedule"), pos.step)
    return pos


def check_same_data(g, path: Path, state: dict, steps_per_epoch: int, cfg: TrainConfig) -> None:
    """A checkpoint resumes only on the training split it was written on: its position (samples into the
    epoch, the epoch's order) means nothing in another one. Checked by the split's size where the file
    records it; in older files, by whether the position lies past this run's epoch."""
    meta, position = state.get("meta", {}), state["position"]
    theirs, ours = meta.get("train_samples"), train_samples(g)
    epoch = position["epoch"] + 1
    if theirs is not None and ours is not None and theirs != ours:
        why = f"was written on a training split of {theirs:,} samples, and this run's holds {ours:,}"
    elif theirs is None and position.get("samples_in_epoch", 0) > steps_per_epoch * global_batch(
            cfg, g.runtime.dist.world_size):
        why = (f"was written {position['samples_in_epoch']:,} samples into epoch {epoch}, past the end of this run's epoch "
               f"({steps_per_epoch} steps of {global_batch(cfg, g.runtime.dist.world_size)} samples)")
    else:
        return
    raise DataError(f"checkpoint {path} (step {position['step']}, epoch {epoch}) {why}: a resume "
                    "goes on in the data it stopped in; resume with the dataset settings it was written with, or "
                    "start a new run (without train.resume, in its own hydra.run.dir)")


def position_here(g, state: dict, steps_per_epoch: int, cfg: TrainConfig) -> Position:
    """The checkpoint's position in this run's steps: the same one when the global batch is the
    same; otherwise the same samples (rounded down to a whole step of this run)."""
    saved, meta = dict(state["position"]), state.get("meta", {})
    old = (meta.get("batch_size") or 1) * (meta.get("grad_accum") or 1) * (meta.get("world_size") or 1)
    saved.setdefault("samples_in_epoch", saved["step_in_epoch"] * old)  # format 1
    saved.setdefault("samples_seen", saved["step"] * old)
    pos = Position(**saved)
    new = global_batch(cfg, g.runtime.dist.world_size)
    if new == old and meta.get("steps_per_epoch") == steps_per_epoch:
        return pos
    pos.step_in_epoch = pos.samples_in_epoch // new
    pos.step = pos.samples_seen // new
    if g.runtime.dist.is_main:
        warnings.warn(f"the checkpoint took {old} samples per step (batch {meta.get('batch_size')} x "
                      f"{meta.get('grad_accum')} x {meta.get('world_size')} processes), this run takes {new}: it "
                      f"goes on after {pos.samples_in_epoch} samples of epoch {pos.epoch + 1} and {pos.samples_seen} "
                      f"in all (step {pos.step} here)", FastpipeWarning)
    return pos
