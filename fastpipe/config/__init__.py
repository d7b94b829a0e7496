"""Structured-config schemas: one dataclass per group choice, registered with Hydra's ConfigStore.

Each YAML file under conf/<group>/ starts from its schema (``defaults: [schema_<name>]``) and holds
only what differs from it, so each key's default and meaning live in one place, its schema. A wrong
type fails with OmegaConf's own message, an unknown key as Hydra composes the config (or, on a node
open to another choice's keys, when it is converted: config/keys.py).

The root config and its checks across groups: config/root.py; what is registered with Hydra, each
group's choice, and ``to_settings``, converting the composed DictConfig once, at the edge (nothing past
it sees Hydra): config/store.py. Each group's schemas have a module of their own.
"""
from __future__ import annotations

from fastpipe.config.compile import CompileConfig
from fastpipe.config.run_context import RunContext
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
from fastpipe.config.logger import Hook
from fastpipe.config.objects import (DatasetConfig, LrScheduleConfig, ModelConfig, ObjectConfig, OptimizerConfig,
                                     TaskConfig)
from fastpipe.config.precision import Fp8PrecisionConfig, PrecisionConfig
from fastpipe.config.profile import ProfileConfig
from fastpipe.config.report import ReportConfig, SweepConfig
from fastpipe.config.root import GROUPS, Config, check_target
from fastpipe.config.runtime import MeasureConfig, RuntimeConfig
from fastpipe.config.store import (config_dir, default_choices, group_schemas, job_choices, register_configs,
                                   root_schema, to_settings)
from fastpipe.config.train import TrainConfig

__all__ = ["Config", "GROUPS", "check_target", "group_schemas", "config_dir", "default_choices", "job_choices",
           "register_configs", "root_schema", "to_settings", "CompileConfig",
           "DaliLoaderConfig", "DatasetConfig", "DdpLauncherConfig", "DefaultLoaderConfig", "FsdpLauncherConfig",
           "LauncherConfig", "ProcessGroupLauncherConfig",
           "LoaderConfig", "LrScheduleConfig", "MeasureConfig", "MmapLoaderConfig", "ModelConfig", "ObjectConfig",
           "OptimizerConfig", "Hook", "RunContext",
           "Fp8PrecisionConfig", "PrecisionConfig", "TaskConfig",
           "ProfileConfig", "ReportConfig", "RuntimeConfig", "SingleLauncherConfig", "SweepConfig", "TrainConfig"]
