"""Sharded checkpoints (launcher=fsdp) through ``torch.distributed.checkpoint`` (DCP).

``step-NNNNNNNN.dcp/`` holds DCP's files (``.metadata`` and one ``__R_0.distcp`` per rank: each rank
writes only its shards of the model and optimizer) and ``train_state.pt`` (position, every rank's
RNG states, schedule, scaler, run facts: what a ``.pt`` checkpoint holds besides the tensors). All
ranks write into ``.step-NNNNNNNN.dcp.partial/``; then rank 0, off the training thread, hashes every
file into the sidecar and renames the folder: the publication rule of ``.pt`` checkpoints (complete
only when the sidecar exists and matches). DCP reshards on load, so a run resumes on any number of
ranks, and under launcher=single or ddp too (the shards are assembled into whole tensors).
"""
from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import torch

from fastpipe.checkpoint.disk import TRAIN_STATE, sha256, write_sidecar
from fastpipe.errors import DataError, TrainingError
from fastpipe.files import fsync_folder, sync_file

FORMAT = 1


def _model_and_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """DCP's view of the model and optimizer: tensors keyed by parameter name (sharded ones stay DTensors)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optimizer_state}


def save_sharded(g, train_state: dict, partial: Path) -> None:
    """Every rank: write this rank's shards into ``partial`` (fsynced); rank 0 adds the train state.
    When rank 0 returns, every rank's files are written (DCP's metadata comes last, from rank 0)."""
    import torch.distributed.checkpoint as dcp

    dcp.save(_model_and_optimizer(g.model, g.optimizer), storage_writer=dcp.FileSystemWriter(partial, sync_files=True))
    if g.runtime.dist.is_main:
        with open(partial / TRAIN_STATE, "wb") as fh:
            torch.save(train_state, fh)
            sync_file(fh)


def save_step(g, folder: Path, step: int, writer, train_state: dict) -> Path:
    """Every rank: the sharded checkpoint of ``step`` in ``folder``, written now into a partial folder
    that rank 0's background ``writer`` (a BackgroundWriter; None on the other ranks) publishes."""
    final = folder / f"step-{step:08d}.dcp"
    partial = folder / f".{final.name}.partial"
    failure = None
    if writer is not None:
        try:
            writer.wait()  # the previous publication (and its rotation) first
            shutil.rmtree(partial, ignore_errors=True)  # an interrupted attempt at this step
            partial.mkdir(parents=True)
        except BaseException as exc:  # raised after the all-reduce, so that no rank waits for rank 0
            failure = exc
    # the folder exists, and is empty, for every rank; or every rank learns that rank 0 failed
    if g.runtime.dist.all_reduce_sum(torch.tensor([float(failure is not None)], device=g.device)).item() > 0:
        if failure is not None:
            raise failure
        raise TrainingError(f"rank 0 could not prepare {partial} for the sharded checkpoint at step {step}; "
                            "its own error says why")
    save_sharded(g, train_state, partial)
    if writer is not None:
        writer.run(lambda: publish(partial, final, train_state["position"]))
    return final


def publish(partial: Path, final: Path, position: dict) -> Path:
    """Rank 0, in the background: hash every file, write the sidecar, then rename ``partial`` to ``final``
    (a complete folder under its name always has its sidecar: checkpoint/files.py)."""
    files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256(p)} for p in sorted(partial.iterdir())}
    fsync_folder(partial)
    write_sidecar(final, {"format": FORMAT, "file": final.name, "files": files, "position": position}, sync=False)
    if final.exists():  # rewriting a step: the old folder no longer matches the sidecar
        shutil.rmtree(final)
    os.replace(partial, final)
    fsync_folder(final.parent)
    return final


def load_sharded(g, path: Path, model_target: str) -> None:
    """Every rank: read the model and optimizer of the sharded checkpoint ``path`` into ``g`` (resharded
    to this run's ranks); one clear line when they are not this model's."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state = _model_and_optimizer(g.model, g.optimizer)
    try:
        dcp.load(state, checkpoint_id=path, no_dist=not torch.distributed.is_initialized())
    except (Exception, CheckpointException) as exc:  # missing keys, other shapes (CheckpointException is a BaseException)
        first = _first_failure(exc)
        raise DataError(f"sharded checkpoint {path} does not fit this run's model {model_target} "
                        f"({first}); resume a checkpoint of the same model and dataset, "
                        "or start without train.resume") from exc
    set_state_dict(g.model, g.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def _first_failure(exc: BaseException) -> str:
    """The first line of what went wrong; a CheckpointException's own text only lists the failed ranks,
    so its first rank's error is named instead."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        cause = next(iter(failures.values()))  # (the exception, its traceback)
        cause = cause[0] if isinstance(cause, tuple) and cause else cause
        exc = cause if isinstance(cause, BaseException) else exc
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"


def read_weights(path: Path) -> dict:
    """The whole model state dict of a sharded checkpoint, assembled in this process (no process group):
    for python -m fastpipe.consolidate."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    state: dict = {}
    # What DCP's own dcp_to_torch_save does (a state dict rebuilt from the checkpoint's metadata),
    # limited to the model: the optimizer's state, twice the model's size with AdamW, is not read.
    with warnings.catch_warnings():  # "no process group: loading in a single process", which is the intent
        warnings.simplefilter("ignore", UserWarning)
        _load_state_dict(state, storage_reader=FileSystemReader(path),
                         planner=_EmptyStateDictLoadPlanner(keys={"model"}), no_dist=True)
    return state["model"]
