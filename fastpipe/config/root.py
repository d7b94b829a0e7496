"""The root config, ``Config``: a field per config group, the keys outside the groups (``train``,
``runtime``, ``report``...), and the checks across groups that no group's own schema can make.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from fastpipe.config import registry
from fastpipe.config._checks import one_of
from fastpipe.config.run_context import RunContext
from fastpipe.config.logger import hooks_from
from fastpipe.config.objects import (OBJECT_GROUPS, DatasetConfig, LrScheduleConfig, ModelConfig, OptimizerConfig,
                                     TaskConfig)
from fastpipe.config.report import ReportConfig, SweepConfig
from fastpipe.config.runtime import MeasureConfig, RuntimeConfig
from fastpipe.config.train import TrainConfig
from fastpipe.errors import ConfigError, EnvironmentProblem


def _group(default=MISSING):
    """A config-group field: Hydra picks its value by a choice on the command line."""
    return field(default=default, metadata={"group": True})


def _object_group(kind):
    """A ``_target_`` group's field: the chosen config merges onto fastpipe's own keys of the group
    (their defaults from ``kind``), so ``dataset.val_fraction=0.1`` works whatever the choice."""
    own = {f.name: f.default for f in fields(kind) if f.name in kind.OWN_KEYS}
    return field(default_factory=lambda: dict(own), metadata={"group": True})


@dataclass
class Config:
    """A run's settings: ``to_settings`` gives one, ``Config.check`` judges the choices together. A
    group's field holds its node, and once converted its schema's object (``dataset`` a DatasetConfig,
    ``data`` a loader's schema, ``profile`` a ProfileConfig or None for profile=off)."""

    dataset: Any = _object_group(DatasetConfig)  # the samples: a callable giving a map-style Dataset, its arguments
    model: Any = _object_group(ModelConfig)  # the network: an nn.Module class or factory, its arguments
    task: Any = _object_group(TaskConfig)  # the objective: loss, metrics and the primary metric (docs/project.md)
    optimizer: Any = _object_group(OptimizerConfig)  # a torch.optim optimizer (_partial_: true), its arguments
    lr_schedule: Any = _object_group(LrScheduleConfig)  # the learning rate over the run's steps
    data: Any = _group()  # the loader: how batches reach the device (docs/data.md)
    precision: Any = _group()  # the number format of the step: fp32, amp or fp8 (docs/precision.md)
    compile: Any = _group()  # torch.compile and its mode
    launcher: Any = _group()  # where the training processes come from: single, ddp or fsdp (docs/distributed.md)
    profile: Any = _group(None)  # torch.profiler traces of a few steps (docs/tools.md)
    # The trackers the run reports to, one entry per chosen logger (logger=[tensorboard,mlflow]); a
    # {name: Hook} once converted; logger=none: none (docs/tracking.md).
    logger: Any = field(default_factory=dict, metadata={"group": True})
    # A project's own hooks, by name: callbacks.NAME._target_=pkg.Class (and its keywords), an object
    # with any of on_window/on_eval/on_checkpoint/on_end, as the loggers (docs/tracking.md); null drops one.
    callbacks: Dict[str, Any] = field(default_factory=dict)
    name: Optional[str] = None  # the run's name in metrics.json, the sweep report and the trackers
    tags: List[str] = field(default_factory=list)  # labels carried into metrics.json, the report and the trackers
    seed: int = 0  # each rank seeds Python, NumPy and torch with seed + rank
    device: str = "auto"  # auto (cuda when present) | cpu | cuda
    train: TrainConfig = field(default_factory=TrainConfig)  # the run's length, batch, evaluations and checkpoints
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)  # process-wide switches
    measure: MeasureConfig = field(default_factory=MeasureConfig)  # how a run measures itself (docs/measuring.md)
    report: ReportConfig = field(default_factory=ReportConfig)  # how a sweep's report compares its jobs
    sweep: SweepConfig = field(default_factory=SweepConfig)  # how a sweep runs its jobs

    def __post_init__(self) -> None:
        one_of("device", self.device, ("auto", "cpu", "cuda"))
        self.logger = hooks_from("logger", self.logger)
        self.callbacks = hooks_from("callbacks", self.callbacks)
        self.tags = [str(t) for t in self.tags or []]
        for group, kind in OBJECT_GROUPS.items():
            node = getattr(self, group)
            if node is not MISSING and (not isinstance(node, dict) or node.get("_target_") or set(node) - set(kind.OWN_KEYS)):
                setattr(self, group, kind.from_node(node))
        # Facts about the run, not settings: the entry point fills them from Hydra's runtime for the record
        # (metrics.json, reports). Attributes rather than fields, so --cfg job and --help do not list them.
        self.overrides: List[str] = []
        self.choices: Dict[str, str] = {}
        self.run_id: str = ""  # set by each launch: a record says which run wrote it
        self.dropped_keys: List[str] = []  # notes on keys of another group choice, dropped (config/keys.py)
        self.context = RunContext()  # the job's place, params and code, for its record and trackers (config/context.py)
        self.started_at: float = 0.0  # when this job started (Unix time): the end-to-end clock's start
        if self.report.objective == "time_to_target" and self.train.target is None:
            raise ConfigError("report.objective=time_to_target ranks the jobs by when they reach train.target, which "
                              "is not set: add train.target=VALUE and train.eval_every=N")

    @property
    def notes(self) -> List[str]:
        """Everything converting the job has to say (warned about, never fatal): the keys dropped."""
        return list(self.dropped_keys)

    def check(self) -> None:
        """The checks that import the project's callables: each ``_target_`` and its keys, and the
        combinations that cannot work, refused before the job builds anything (and before a fresh training
        process or a rank is started)."""
        for group in OBJECT_GROUPS:
            getattr(self, group).check()
        for hook in list(self.logger.values()) + list(self.callbacks.values()):
            hook.check()
        kind = self.dataset.declared("sample_kind")
        wanted = self.task.declared("dataset_kinds")
        if kind is not None and wanted is not None and kind not in wanted:
            raise ConfigError(f"task={self.choices.get('task', self.task.short_name)} trains on {' or '.join(wanted)} "
                              f"data, but dataset={self.choices.get('dataset', self.dataset.short_name)} gives "
                              f"{kind}; choose a matching dataset (e.g. task=lm dataset=tokens)")
        if self.train.target is not None:
            check_target(self.train.target, self.task.declared("primary"), self.task.declared("bounds"),
                         self.choices.get("task", self.task.short_name))
        self._check_closed_choices()
        self.optimizer.refuse_auto_with(self.launcher.name, registry.choice("launcher", self.launcher.name).shards)
        if self.precision.name == "fp8":
            self._check_fp8()

    def check_own_values(self, groups=tuple(OBJECT_GROUPS), target: bool = True) -> None:
        """What every job of a sweep is checked for before the first one starts (sweeps/check.py): the
        ``_target_`` keys of ``groups`` against their callables, and (``target``) train.target against
        the task's bounds. Not what may fail for one job alone (a dataset's folder, a combination of
        choices): a failed row."""
        for group in groups:
            getattr(self, group).check_keys()
        if target and self.train.target is not None:
            check_target(self.train.target, self.task.declared("primary"), self.task.declared("bounds"),
                         self.choices.get("task", self.task.short_name))

    def _check_closed_choices(self) -> None:
        """Each closed group's choice against what it supports (config/registry.py): the launcher it runs
        under, and for the loader the dataset's format and collate function."""
        for group in registry.CLOSED_GROUPS:
            chosen = registry.choice(group, getattr(self, group).name)
            chosen.refuse_unsupported(launcher=self.launcher.name)
            chosen.refuse_missing()
        loader = registry.choice("data", self.data.name)
        if self.dataset.collate_fn is not None and not loader.uses_collate_fn:
            collating = [c for c in registry.names("data") if registry.choice("data", c).uses_collate_fn]
            raise ConfigError(f"dataset.collate_fn is used by data={' or data='.join(collating)} only; "
                              f"data={self.data.name} makes its batches itself: use data={collating[0]}, or drop "
                              "dataset.collate_fn")
        dataset = self.choices.get("dataset", self.dataset.short_name)
        loader.refuse_format(self.dataset.declared("data_format") or "samples", dataset)
        allowed = self.dataset.declared("loaders")  # a project's dataset may allow fewer loaders than its format
        if allowed is not None and self.data.name not in allowed:
            why = self.dataset.declared("loaders_note") or f"it allows data={' or data='.join(allowed)} only"
            raise ConfigError(f"data={self.data.name} cannot read dataset={dataset}: {why}; use "
                              f"data={' or data='.join(allowed)}")

    def _check_fp8(self) -> None:
        """precision=fp8 compiled: eager fp8 casts cost more than they save (torchao: its registered requirement)."""
        if self.compile.name == "off":
            raise ConfigError("precision=fp8 with compile=off: without torch.compile the fp8 casts run as separate "
                              "kernels and training is slower than bf16; use compile=default (or another mode), "
                              "or precision=amp")


# The config groups, in the order of the root config's fields: one list for the entry point,
# metrics.json's ``choices``, the sweep winner and the tests.
GROUPS = tuple(f.name for f in fields(Config) if f.metadata.get("group"))


def check_target(target: float, metric, bounds, task: str) -> None:
    """Refuse a ``train.target`` outside the range the task declares for its primary metric."""
    if bounds is None:
        return
    low, high = (None if b is None else float(b) for b in bounds)
    if (low is not None and target < low) or (high is not None and target > high):
        span = f"[{'-inf' if low is None else format(low, 'g')}, {'inf' if high is None else format(high, 'g')}]"
        raise ConfigError(f"train.target={target:g} lies outside {metric or 'the primary metric'}'s range {span} "
                          f"(task={task} declares it): give a target inside it")
