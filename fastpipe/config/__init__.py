"""Structured-config schemas: one dataclass per group choice, registered with Hydra's ConfigStore.

Each YAML file under conf/<group>/ starts from its schema (``defaults: [schema_<name>]``) and holds
only what differs from it, so each key's default and meaning live in one place, its schema here.
A wrong type or an unknown key fails with OmegaConf's own message. ``to_settings`` converts the
composed DictConfig to these dataclasses once, at the edge; nothing past it sees Hydra.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, List

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from fastpipe.config import data, launcher
from fastpipe.config._checks import one_of
from fastpipe.config.compile import CompileConfig
from fastpipe.config.data import (
    DaliLoaderConfig,
    DefaultLoaderConfig,
    LoaderConfig,
    MmapLoaderConfig,
)
from fastpipe.config.launcher import (
    DdpLauncherConfig,
    LauncherConfig,
    SingleLauncherConfig,
)
from fastpipe.config.objects import DatasetConfig, ModelConfig
from fastpipe.config.precision import PrecisionConfig
from fastpipe.config.profile import ProfileConfig
from fastpipe.config.report import ReportConfig, SweepConfig
from fastpipe.config.runtime import MeasureConfig, RuntimeConfig
from fastpipe.config.train import TrainConfig
from fastpipe.errors import ConfigError

__all__ = ["Config", "GROUPS", "SCHEMAS", "config_dir", "register_configs", "to_settings", "CompileConfig",
           "DaliLoaderConfig", "DatasetConfig", "DdpLauncherConfig", "DefaultLoaderConfig", "LauncherConfig",
           "LoaderConfig", "MeasureConfig", "MmapLoaderConfig", "ModelConfig", "PrecisionConfig",
           "ProfileConfig", "ReportConfig", "RuntimeConfig", "SingleLauncherConfig", "SweepConfig", "TrainConfig"]


def _group(default=MISSING):
    """A config-group field: Hydra picks its value by a choice on the command line."""
    return field(default=default, metadata={"group": True})


@dataclass
class Config:
    dataset: Any = _group()
    model: Any = _group()
    data: Any = _group()
    precision: Any = _group()
    compile: Any = _group()
    launcher: Any = _group()
    profile: Any = _group(None)  # a ProfileConfig (profile=off|on); None = off
    seed: int = 0  # each rank seeds Python, NumPy and torch with seed + rank
    device: str = "auto"  # auto (cuda when present) | cpu | cuda
    train: TrainConfig = field(default_factory=TrainConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    # Filled by the entry point from Hydra's runtime, for the record (metrics.json, reports):
    overrides: List[str] = field(default_factory=list)
    choices: Dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        one_of("device", self.device, ("auto", "cpu", "cuda"))


# The config groups, in the order of the root config's fields: one list for the entry point,
# metrics.json's ``choices``, the sweep winner and the tests.
GROUPS = tuple(f.name for f in fields(Config) if f.metadata.get("group"))

SCHEMAS = {
    "dataset": {"dataset": DatasetConfig},
    "model": {"model": ModelConfig},
    "data": data.SCHEMAS,
    "precision": {"precision": PrecisionConfig},
    "compile": {"compile": CompileConfig},
    "launcher": launcher.SCHEMAS,
    "profile": {"profile": ProfileConfig},
}


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
    cs.store(name="fastpipe_schema", node=Config)
    for group, schemas in SCHEMAS.items():
        for name, node in schemas.items():
            cs.store(group=group, name=f"schema_{name}", node=node)


def to_settings(cfg: DictConfig) -> Config:
    """Convert the composed config to dataclasses (running every schema's validation)."""
    try:
        return OmegaConf.to_object(cfg)
    except ConfigError:
        raise
    except Exception as exc:  # OmegaConf's own messages name the key; keep them
        raise ConfigError(str(exc).splitlines()[0]) from exc
