"""``logger`` (the trackers a run reports to) and ``callbacks`` (a project's own hooks) (docs/tracking.md).

Both are objects built from a ``_target_`` that see the run only where the loop already has numbers
on the host: ``on_window(run, scalars)``, ``on_eval(run, metrics)``, ``on_checkpoint(run, path)``,
``on_end(run, record)`` (and ``on_start(run)``), each optional. Each choice of the logger group nests
its keys under its own name (conf/logger/mlflow.yaml holds ``mlflow: {...}``, as lightning-hydra-
template's configs/logger do), so several compose: ``logger=[tensorboard,mlflow]``. A logger's keys,
their defaults and meaning are its schema below, registered with ``register_logger``; the logger class
(record/loggers/) takes them by extending it, and declares what else it needs and writes
(fastpipe/protocols.py's ``Logger``). A project's own logger (its conf/logger/NAME.yaml) or callback
(``callbacks.NAME._target_=...``) is a ``_target_`` and its callable's keyword arguments, checked
against the callable's signature.
"""
from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field, make_dataclass
from typing import Any, Dict, Optional, Tuple

from fastpipe.config._checks import one_of
from fastpipe.config.registry import SCHEMA_PREFIX, Requirement
from fastpipe.errors import ConfigError, EnvironmentProblem

LOGGERS = "fastpipe.record.loggers"
# logger name -> {name: schema}: each registered logger's ConfigStore node, keys nested under its name.
SCHEMAS: Dict[str, Dict[str, type]] = {}


def register_logger(name: str, target: str):
    """Register the decorated dataclass as ``logger=NAME``'s keys: Hydra's ConfigStore gets
    ``logger/schema_NAME``, the keys nested under NAME with ``_target_=target`` (the logger's class,
    which extends the dataclass, so each default is written once). Registering a name again replaces it."""
    def add(keys: type) -> type:
        from hydra.core.config_store import ConfigStore

        node = make_dataclass(f"{keys.__name__}Node", [("_target_", str, field(default=target))], bases=(keys,))
        SCHEMAS[name] = {name: node}
        ConfigStore.instance().store(group="logger", name=SCHEMA_PREFIX + name, node=SCHEMAS[name])
        return keys

    return add


def logger_names() -> Tuple[str, ...]:
    """The registered loggers, in registration order."""
    return tuple(SCHEMAS)


def logger_class(name: str) -> Optional[type]:
    """The class of the registered logger ``name`` (what it declares: fastpipe/protocols.py), or None when
    ``name`` is not registered or its module does not import."""
    schema = SCHEMAS.get(name, {}).get(name)
    return None if schema is None else _declared(schema._target_)


@register_logger("tensorboard", f"{LOGGERS}.tensorboard.TensorBoardLogger")
@dataclass
class TensorBoardLoggerConfig:
    folder: str = "tb"  # the event files' folder inside the run folder (tensorboard --logdir outputs)


@register_logger("csv", f"{LOGGERS}.csv_file.CsvLogger")
@dataclass
class CsvLoggerConfig:
    file: str = "metrics.csv"  # inside the run folder: one row per logged step, a column per scalar


@register_logger("mlflow", f"{LOGGERS}.mlflow_run.MlflowLogger")
@dataclass
class MlflowLoggerConfig:
    # Where runs go: http(s)://HOST:PORT (a team's tracking server), sqlite:///PATH, databricks, ...;
    # null = $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the working folder (no server needed).
    tracking_uri: Optional[str] = None
    experiment: Optional[str] = None  # the MLflow experiment; null = the working folder's name
    # Seconds one request to a tracking server may take (retried twice), and how long the run's end
    # waits for the tracker without progress before it goes on without it.
    timeout_s: float = 5.0
    artifacts: bool = True  # upload graph.txt, summary.txt, loss.png, metrics.json, .hydra/ and code.diff at the end

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ConfigError(f"logger.mlflow.timeout_s={self.timeout_s} must be > 0 (seconds)")


@register_logger("wandb", f"{LOGGERS}.wandb_run.WandbLogger")
@dataclass
class WandbLoggerConfig:
    project: Optional[str] = None  # the W&B project; null = the working folder's name
    entity: Optional[str] = None  # the team or user; null = the API key's default entity
    # online | offline | disabled; null = $WANDB_MODE, else online with an API key configured
    # (WANDB_API_KEY or `wandb login`), offline without one (`wandb sync` uploads it later).
    mode: Optional[str] = None
    timeout_s: float = 30.0  # the longest wandb.init may take, and the run's end waits without progress

    def __post_init__(self) -> None:
        if self.mode is not None:
            one_of("logger.wandb.mode", self.mode, ("online", "offline", "disabled"))
        if not self.timeout_s > 0:
            raise ConfigError(f"logger.wandb.timeout_s={self.timeout_s} must be > 0 (seconds)")


@dataclass
class Hook:
    """One logger or callback: where it is configured (``kind.name``), its ``_target_`` and its keywords."""

    kind: str  # "logger" or "callbacks"
    name: str
    target: str
    params: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_node(cls, kind: str, name: str, node: Any) -> "Hook":
        if dataclasses.is_dataclass(node):
            node = dataclasses.asdict(node)
        if not isinstance(node, dict) or not node.get("_target_"):
            raise ConfigError(f"{kind}.{name} has no _target_; give {kind}.{name}._target_=pkg.module.Class "
                              "(docs/tracking.md)")
        params = {k: v for k, v in node.items() if k != "_target_"}
        return cls(kind, str(name), str(node["_target_"]), params)

    @property
    def key(self) -> str:
        return f"{self.kind}.{self.name}"

    def callable(self):
        from fastpipe.instantiate import import_target

        return import_target(f"{self.key}._target_", self.target)

    def check(self) -> None:
        """The package it needs is installed, it imports, and its keys are its callable's parameters."""
        requires = getattr(_declared(self.target), "requires", None)
        if requires and not Requirement(*requires).installed():
            package, extra = requires[:2]
            others = ", ".join(f"logger={n}" for n in logger_names() if not getattr(logger_class(n), "requires", None))
            what = f"logger={self.name}" if self.kind == "logger" else self.key
            raise EnvironmentProblem(f"{what} needs the {package} package, which is not "
                                     f"installed here; install it: pip install \"{extra}\" (or choose "
                                     f"another: {others} or logger=none)")
        from fastpipe.instantiate import check_params

        check_params(self.key, self.callable(), self.target, self.params)

    def build(self):
        from fastpipe.instantiate import instantiate

        return instantiate(self.key, self.target, dict(self.params))


def _declared(target: str):
    """The class ``target`` names when its module imports (without the package it may need), else None."""
    module, _, name = target.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def hooks_from(kind: str, node: Any) -> Dict[str, Hook]:
    """``{name: Hook}`` of a ``logger`` or ``callbacks`` node (an entry set to null is left out)."""
    if node is None:
        return {}
    if not isinstance(node, dict):
        raise ConfigError(f"{kind} must be named entries ({kind}.NAME._target_=...), not {node!r}")
    return {str(name): value if isinstance(value, Hook) else Hook.from_node(kind, name, value)
            for name, value in node.items() if value is not None}


def logger_choice(chosen: Any, node: Any) -> Optional[str]:
    """The logger group's choice as Hydra spells it: ``tensorboard``, ``[tensorboard,mlflow]``, ``none``.

    Hydra's runtime choices hold a name only for one choice; for a list, the composed node's entries
    (one per chosen file, each under its own name) say what was chosen."""
    if isinstance(chosen, str):
        return chosen
    names = list(node or {})
    if chosen is None and node is None:
        return None
    return f"[{','.join(names)}]" if names else "none"
