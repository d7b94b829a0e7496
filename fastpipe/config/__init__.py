"""Structured-config schemas: one dataclass per group choice, registered with Hydra's ConfigStore.

Each YAML file under conf/<group>/ starts from its schema (``defaults: [schema_<name>]``) and holds
only what differs from it, so each key's default and meaning live in one place, its schema here.
A wrong type fails with OmegaConf's own message, an unknown key when the config is converted
(config/keys.py). ``to_settings`` converts the composed DictConfig to these dataclasses once, at the
edge; nothing past it sees Hydra. fastpipe 0.1's spellings are no schema's keys: config/legacy.py.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from fastpipe.config import keys, legacy, registry
from fastpipe.config._checks import one_of
from fastpipe.config.compile import CompileConfig
from fastpipe.config.context import RunContext
from fastpipe.config.data import (
    DaliLoaderConfig,
    DefaultLoaderConfig,
    LoaderConfig,
    MmapLoaderConfig,
)
from fastpipe.config.launcher import (
    DdpLauncherConfig,
    FsdpLauncherConfig,
    LauncherConfig,
    ProcessGroupLauncherConfig,
    SingleLauncherConfig,
)
from fastpipe.config.logger import SCHEMAS as LOGGER_SCHEMAS, Hook, hooks_from, logger_choice
from fastpipe.config.objects import (OBJECT_GROUPS, DatasetConfig, LrScheduleConfig, ModelConfig, ObjectConfig,
                                     OptimizerConfig, TaskConfig)
from fastpipe.config.precision import Fp8PrecisionConfig, PrecisionConfig
from fastpipe.config.profile import ProfileConfig
from fastpipe.config.report import ReportConfig, SweepConfig
from fastpipe.config.runtime import MeasureConfig, RuntimeConfig
from fastpipe.config.train import TrainConfig
from fastpipe.errors import ConfigError, EnvironmentProblem, FastpipeError

__all__ = ["Config", "GROUPS", "SCHEMAS", "group_schemas", "config_dir", "default_choices", "job_choices",
           "register_configs", "to_settings", "CompileConfig",
           "DaliLoaderConfig", "DatasetConfig", "DdpLauncherConfig", "DefaultLoaderConfig", "FsdpLauncherConfig",
           "LauncherConfig", "ProcessGroupLauncherConfig",
           "LoaderConfig", "LrScheduleConfig", "MeasureConfig", "MmapLoaderConfig", "ModelConfig", "ObjectConfig",
           "OptimizerConfig", "Hook", "RunContext",
           "Fp8PrecisionConfig", "PrecisionConfig", "TaskConfig",
           "ProfileConfig", "ReportConfig", "RuntimeConfig", "SingleLauncherConfig", "SweepConfig", "TrainConfig"]


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
    dataset: Any = _object_group(DatasetConfig)  # a DatasetConfig once converted
    model: Any = _object_group(ModelConfig)  # a ModelConfig
    task: Any = _object_group(TaskConfig)  # a TaskConfig
    optimizer: Any = _object_group(OptimizerConfig)  # an OptimizerConfig
    lr_schedule: Any = _object_group(LrScheduleConfig)  # an LrScheduleConfig
    data: Any = _group()
    precision: Any = _group()
    compile: Any = _group()
    launcher: Any = _group()
    profile: Any = _group(None)  # a ProfileConfig (profile=off|on); None = off
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
    train: TrainConfig = field(default_factory=TrainConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)

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
    def deprecations(self) -> List[str]:
        """What old spellings in this config should become (warned about, never fatal)."""
        return [n for g in OBJECT_GROUPS for n in getattr(getattr(self, g), "deprecations", [])]

    @property
    def notes(self) -> List[str]:
        """Everything converting the config has to say: the deprecations, then the keys dropped."""
        return self.deprecations + self.dropped_keys

    def check(self) -> None:
        """The checks that import the project's callables: each ``_target_`` and its keys, and the
        combinations that cannot work, refused before any training process starts."""
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
            registry.choice(group, getattr(self, group).name).refuse_unsupported(launcher=self.launcher.name)
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
        """precision=fp8's combinations: compiled (eager fp8 casts cost more than they save), torchao present."""
        from importlib.util import find_spec

        if self.compile.name == "off":
            raise ConfigError("precision=fp8 with compile=off: without torch.compile the fp8 casts run as separate "
                              "kernels and training is slower than bf16; use compile=default (or another mode), "
                              "or precision=amp")
        if find_spec("torchao") is None:
            raise EnvironmentProblem("precision=fp8 needs torchao's float8 training, which is not installed: "
                                     "pip install 'fastpipe[fp8]' (or use precision=amp)")


# The config groups, in the order of the root config's fields: one list for the entry point,
# metrics.json's ``choices``, the sweep winner and the tests.
GROUPS = tuple(f.name for f in fields(Config) if f.metadata.get("group"))

def group_schemas() -> Dict[str, Dict[str, type]]:
    """``{group: {schema name: schema}}``: the closed groups' from their registry (choices a project
    registered included), and the profile group's (fastpipe 0.1's schema_model / schema_dataset:
    config/legacy.py)."""
    return {
        **{group: registry.schemas(group) for group in registry.CLOSED_GROUPS},
        "profile": {"profile": ProfileConfig},
    }


SCHEMAS = group_schemas()  # fastpipe's own; group_schemas() also has the ones registered since


def job_choices(runtime_choices, cfg=None) -> Dict[str, str]:
    """Each group's choice, from Hydra's ``hydra.runtime.choices`` (and, for the logger group, whose list
    Hydra does not record, the composed ``cfg``): metrics.json's ``choices``."""
    choices = {g: str(runtime_choices.get(g)) for g in GROUPS if g in runtime_choices and g != "logger"}
    node = cfg.get("logger") if cfg is not None and hasattr(cfg, "get") else None
    logger = logger_choice(runtime_choices.get("logger"), None if node is None else dict(node))
    if logger is not None and ("logger" in runtime_choices or node is not None):
        choices["logger"] = logger
    return choices


def default_choices() -> Dict[str, str]:
    """fastpipe's own choice of each group (conf/config.yaml's defaults list)."""
    defaults = OmegaConf.to_container(OmegaConf.load(Path(config_dir()) / "config.yaml")).get("defaults") or []
    return {str(k): str(v) for entry in defaults if isinstance(entry, dict) for k, v in entry.items()}


def check_target(target: float, metric, bounds, task: str) -> None:
    """Refuse a ``train.target`` outside the range the task declares for its primary metric."""
    if bounds is None:
        return
    low, high = (None if b is None else float(b) for b in bounds)
    if (low is not None and target < low) or (high is not None and target > high):
        span = f"[{'-inf' if low is None else format(low, 'g')}, {'inf' if high is None else format(high, 'g')}]"
        raise ConfigError(f"train.target={target:g} lies outside {metric or 'the primary metric'}'s range {span} "
                          f"(task={task} declares it): give a target inside it")


def config_dir() -> str:
    """The packaged conf/: fastpipe/conf when installed, ../conf in a source checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "conf", here.parent / "conf"):
        if (candidate / "config.yaml").is_file():
            return str(candidate)
    raise FileNotFoundError("fastpipe's conf/ folder is missing from the installation; reinstall fastpipe")


def register_configs() -> None:
    """Register the root schema and each group's schemas (named ``schema_<name>``)."""
    cs = ConfigStore.instance()
    cs.store(name="fastpipe_schema", node=root_schema())
    for group, schemas in group_schemas().items():
        for name, kind in schemas.items():  # a group of several schemas takes their keys (config/keys.py)
            cs.store(group=group, name=f"schema_{name}", node=keys.schema_node(kind, open_keys=len(schemas) > 1))
    for group, schemas in legacy.SCHEMAS.items():  # schema_model / schema_dataset, for 0.1's YAML files
        for name, kind in schemas.items():
            cs.store(group=group, name=f"schema_{name}", node=kind)
    for name, node in LOGGER_SCHEMAS.items():  # each logger's keys under its own name: several compose
        cs.store(group="logger", name=f"schema_{name}", node=node)


def root_schema() -> DictConfig:
    """The root config's structured node, its ``train`` open to fastpipe 0.1's keys (config/legacy.py)."""
    return legacy.accepting_old_train_keys(OmegaConf.structured(Config))


def to_settings(cfg: DictConfig, choices: Optional[Dict[str, str]] = None, check: bool = True) -> Config:
    """Convert the composed config to dataclasses (running every schema's validation); with ``check``
    also import each ``_target_`` and check its keys and the combination (``Config.check``). ``cfg``
    itself is left as it is."""
    cfg = copy.deepcopy(cfg)
    old = legacy.take_old_train_keys(cfg)  # fastpipe 0.1's train keys, taken out
    dropped = keys.drop_other_choices_keys(cfg, group_schemas())
    keys.refuse_added_keys(cfg)
    try:
        settings = OmegaConf.to_object(cfg)
    except FastpipeError:  # a schema's own message, or a stop signal (Preempted) that landed here
        raise
    except Exception as exc:  # OmegaConf's own messages name the key; keep them
        raise ConfigError(str(exc).splitlines()[0]) from exc
    legacy.apply_old_train_keys(old, settings)
    settings.dropped_keys = dropped
    settings.choices = dict(choices or {})
    if check:
        settings.check()
    return settings
