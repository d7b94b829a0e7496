"""Loggers and a project's callbacks: objects built from a ``_target_`` (config/logger.py) that see the run
where the loop already reports, each hook optional (docs/tracking.md):

    on_start(run)              before the job builds anything
    on_window(run, scalars)    at each measurement window's edge and each epoch's end ({"train/loss": ...})
    on_eval(run, metrics)      after each evaluation ({"val/accuracy": ..., "val/loss": ...})
    on_checkpoint(run, path)   when a checkpoint is complete on disk
    on_curve(run, tag, points) a curve measured before training, on its own steps ([(step, value)]:
                               optimizer.lr=auto's lr_find/loss)
    on_end(run, record)        at the end, whatever the outcome (metrics.json's content, a dict)

``run`` is a ``RunInfo``; its ``step`` is the event's optimizer step. dispatch.py calls each object
from a thread of its own; tensorboard.py, csv_file.py, mlflow_run.py and wandb_run.py are the built-in
loggers, sweep.py the trackers' sweep-level runs, state.py the folder's ``trackers.json``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Tuple


def preflight(hooks) -> None:
    """Each logger's own check before anything trains (config/logger.py's Hooks): a tracking server that
    does not answer is one line naming it (a FastpipeError), not a failure found mid-run."""
    for hook in hooks:
        check = getattr(hook.callable(), "preflight", None)
        if check is not None:
            check(hook.params)


def numbers(record: dict, prefix: str = "") -> Dict[str, float]:
    """metrics.json's numbers, flat: ``throughput``, ``val_metrics.accuracy``, ``step_time_ms.median``: the
    summary each tracker keeps of the run."""
    out: Dict[str, float] = {}
    for name, value in record.items():
        if isinstance(value, dict):
            out.update(numbers(value, f"{prefix}{name}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and name != "schema_version":
            out[f"{prefix}{name}"] = float(value)
    return out


def short_path(path) -> str:
    """A folder as the user would name it: relative to the working folder when inside it."""
    path = Path(path).absolute()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class RunInfo:
    """What a logger or callback knows of the run."""

    dir: Path  # the run folder
    run_id: str  # this launch's id (metrics.json's run_id)
    name: str  # the tracker run's name: the config's name, else the run folder ("#N" for a sweep's job N)
    tags: Tuple[str, ...] = ()  # the config's tags
    choices: Dict[str, str] = field(default_factory=dict)  # every group's choice
    overrides: Tuple[str, ...] = ()  # the job's command-line overrides
    params: Dict[str, Any] = field(default_factory=dict)  # the composed config, flattened (RunContext.params)
    code: Optional[Dict[str, Any]] = None  # metrics.json's code
    stage: str = "run"  # run | job | probe | full | trial (config/context.py)
    sweep_dir: Optional[Path] = None
    sweep_name: Optional[str] = None  # the sweep's name: the config's name, else its folder
    job: Optional[int] = None
    round: Optional[int] = None  # a halving probe's round
    repeat: Optional[int] = None  # report.repeats: which measurement of the job
    trackers: Dict[str, Any] = field(default_factory=dict)  # the sweep's tracker state (its trackers.json)
    resumed: bool = False  # train.resume is set: a tracker continues the run this folder's trackers.json names
    rank: int = 0
    step: int = 0  # the optimizer step of the event

    @classmethod
    def of(cls, settings, run_dir: Path, rank: int = 0) -> "RunInfo":
        """The RunInfo of the job ``settings`` describe, training in ``run_dir``."""
        ctx = settings.context
        sweep_name = (settings.name or short_path(ctx.sweep_dir)) if ctx.sweep_dir else None
        if ctx.sweep_dir is None:
            name = settings.name or short_path(run_dir)
        else:
            name = f"{sweep_name} #{ctx.job}" + (f" probe {ctx.round}" if ctx.stage == "probe" else "")
        if ctx.repeat is not None:
            name += f" repeat {ctx.repeat}"
        return cls(dir=Path(run_dir).absolute(), run_id=settings.run_id, name=name, tags=tuple(settings.tags),
                   choices=dict(settings.choices), overrides=tuple(settings.overrides), params=dict(ctx.params),
                   code=ctx.code, stage=ctx.stage, sweep_dir=Path(ctx.sweep_dir) if ctx.sweep_dir else None,
                   sweep_name=sweep_name, job=ctx.job, round=ctx.round, repeat=ctx.repeat,
                   trackers=dict(ctx.trackers), resumed=settings.train.resume is not None, rank=rank)

    @property
    def working_folder(self) -> Path:
        return Path(os.getcwd())
