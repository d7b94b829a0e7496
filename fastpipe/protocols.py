"""What a new choice implements: the contracts fastpipe's builders, loop and reports call.

fastpipe never checks a class against these at run time (they are ``typing.Protocol`` classes, for
readers and type checkers); what it checks is what a choice *declares* where it is registered:

- ``data``, ``precision`` (and ``compile``, ``launcher``): a builder, registered with its schema and
  what it supports in config/registry.py (``register``: the formats a loader ``reads``, whether its
  builder takes ``subset`` (``held_out_subset``), reads a stream (``streams``), trains on cut splits
  (``overfit_batches``), the package it ``requires``; whether a precision is ``half``).
- ``logger``: a class extending its schema (config/logger.py's ``register_logger``), with the hooks below
  and the class attributes of ``Logger``.
- ``task`` and ``callbacks``: a ``_target_`` a project names; nothing to register.

docs/architecture.md ("Where a new option goes") lists, for each kind of addition, the files it touches.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Protocol, Sequence, Tuple

import torch


class Loader(Protocol):
    """What every loader gives the loop: batches of (inputs, targets) on the training device."""

    def __len__(self) -> int: ...  # batches per epoch on this process

    def __iter__(self) -> Iterator[tuple]: ...

    def set_epoch(self, epoch: int) -> None: ...  # the epoch's order (and augmentation) from (seed, epoch)

    def describe(self) -> str: ...  # graph.txt's loader line


class LoaderBuilder(Protocol):
    """A ``data`` choice's registered builder: the training loader (``train``; shuffled by seed and epoch,
    sharded over the ranks) or the held-out one of ``splits`` (data/splits.py's DataSplits), on
    ``runtime`` (runtime.py's Runtime: the device and the processes). ``subset``, only when the choice
    registers ``held_out_subset=True``: positions in the held-out split, in a seeded random order
    (data/held_out_batches.py), to read instead of all of it, each batch the next positions in that order (a
    screen's statistical early end takes its first batches to be a random draw of the subset)."""

    def __call__(self, cfg: Any, splits: Any, runtime: Any, batch_size: int, seed: int, train: bool,
                 channels_last: bool, subset: Optional[Sequence[int]] = None) -> Loader: ...


class PrecisionBuilder(Protocol):
    """A ``precision`` choice's registered builder: from its schema, the training device and whether the
    launcher shards the model (FSDP2 casts instead of autocast), stages/precision.py's ``Precision``:
    its ``autocast()``, its GradScaler, and ``prepare(model, device)``, which the launcher calls on the bare
    model before wrapping or sharding it (precision=fp8 swaps its Linear layers there)."""

    def __call__(self, cfg: Any, device: torch.device, by_fsdp: bool = False) -> Any: ...


class Task(Protocol):
    """The objective (``task._target_``): what the loop, evaluation and the reports ask of a task
    (stages/tasks.py describes its optional members: ``summarize``, ``bounds``, ``dataset_kinds``,
    ``soft_targets``, ``check_batch``, ``check_output``)."""

    primary: str  # the metric parity, the target, the winner and HParams use
    higher_is_better: bool

    def loss(self, output, target) -> torch.Tensor: ...  # the batch's mean loss, a scalar

    def metrics(self, output, target) -> Dict[str, torch.Tensor]: ...  # name -> SUM over the batch, on the device


class Callback(Protocol):
    """A project's hooks (``callbacks.NAME._target_``): called off the training thread where the loop
    already has numbers on the host, each hook optional (record/loggers/__init__.py's RunInfo is ``run``)."""

    def on_start(self, run) -> None: ...  # before the job builds anything

    def on_window(self, run, scalars: Dict[str, float]) -> None: ...  # a measurement window's edge, an epoch's end

    def on_eval(self, run, metrics: Dict[str, float]) -> None: ...  # after each evaluation

    def on_checkpoint(self, run, path: Path) -> None: ...  # when a checkpoint is complete on disk

    def on_end(self, run, record: dict) -> None: ...  # at the end, whatever the outcome (metrics.json's content)


class Logger(Callback, Protocol):
    """A tracker (``logger=NAME``): a Callback whose class extends its registered schema (so its keys and
    defaults are written once) and declares, as class attributes, what the rest of fastpipe reads of it.
    Optional classmethods: ``preflight(params)`` (a check before anything trains), ``settle(entry, record,
    run_dir)`` (end a run its trainer left open), ``sweep_start(params, sweep, kept)``, ``sweep_end(entry,
    sweep_dir, result)`` and ``sweep_abandoned(entry)`` (a sweep-level run: record/loggers/sweep.py)."""

    requires: Tuple[str, str]  # (module, pip requirement) it needs: the config check and the doctor read it
    state_key: str  # its entry in the run folder's trackers.json, when it keeps one
    writes: str  # what it leaves in the run folder, in the sweep report's words: "`metrics.csv`"
    working_files: Tuple[str, ...]  # what it writes into the working folder: not the project's code (provenance)
    timeout_s: float  # how long the run's end waits for it without progress (dispatch.py)
