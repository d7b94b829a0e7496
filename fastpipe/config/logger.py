"""``logger`` (the trackers a run reports to) and ``callbacks`` (a project's own hooks) (docs/tracking.md).

Both are objects built from a ``_target_`` that see the run only where the loop already has numbers
on the host: ``on_window(run, scalars)``, ``on_eval(run, metrics)``, ``on_checkpoint(run, path)``,
``on_end(run, record)`` (and ``on_start(run)``), each optional. Each choice of the logger group nests
its keys under its own name (conf/logger/mlflow.yaml holds ``mlflow: {...}``, as lightning-hydra-
template's configs/logger do), so several compose: ``logger=[tensorboard,mlflow]``. The built-in
loggers' keys are the schemas below; a project's own logger (its conf/logger/NAME.yaml) or callback
(``callbacks.NAME._target_=...``) is a ``_target_`` and its callable's keyword arguments, checked
against the callable's signature.
"""
from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from fastpipe.config._checks import one_of
from fastpipe.errors import ConfigError, EnvironmentProblem

LOGGERS = "fastpipe.record.loggers"


@dataclass
class TensorBoardLoggerConfig:
    _target_: str = f"{LOGGERS}.tensorboard.TensorBoardLogger"
    folder: str = "tb"  # the event files' folder inside the run folder (tensorboard --logdir outputs)


@dataclass
class CsvLoggerConfig:
    _target_: str = f"{LOGGERS}.csv_file.CsvLogger"
    file: str = "metrics.csv"  # inside the run folder: one row per logged step, a column per scalar


@dataclass
class MlflowLoggerConfig:
    _target_: str = f"{LOGGERS}.mlflow_run.MlflowLogger"
    # Where runs go: http(s)://HOST:PORT (a team's tracking server), sqlite:///PATH, databricks, ...;
    # null = $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the working folder (no server needed).
    tracking_uri: Optional[str] = None
    experiment: Optional[str] = None  # the MLflow experiment; null = the working folder's name
    # Seconds one request to a tracking server may take (retried twice), and how long the run's end
    # waits for the tracker without progress before it goes on without it.
    timeout_s: float = 5.0
    artifacts: bool = True  # upload graph.txt, loss.png, metrics.json, .hydra/ and code.diff at the end

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ConfigError(f"logger.mlflow.timeout_s={self.timeout_s} must be > 0 (seconds)")


@dataclass
class WandbLoggerConfig:
    _target_: str = f"{LOGGERS}.wandb_run.WandbLogger"
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


# Registered as logger/schema_NAME, each nested under its name (the choice files' package is logger).
SCHEMAS = {"tensorboard": {"tensorboard": TensorBoardLoggerConfig}, "csv": {"csv": CsvLoggerConfig},
           "mlflow": {"mlflow": MlflowLoggerConfig}, "wandb": {"wandb": WandbLoggerConfig}}


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
        from fastpipe.targets import import_target

        return import_target(f"{self.key}._target_", self.target)

    def check(self) -> None:
        """The package it needs is installed, it imports, and its keys are its callable's parameters."""
        requires = getattr(_declared(self.target), "requires", None)
        if requires:
            package, extra = requires
            if importlib.util.find_spec(package) is None:
                others = "logger=tensorboard, logger=csv or logger=none"
                what = f"logger={self.name}" if self.kind == "logger" else self.key
                raise EnvironmentProblem(f"{what} needs the {package} package, which is not "
                                         f"installed here; install it: pip install \"{extra}\" (or choose "
                                         f"another: {others})")
        from fastpipe.targets import check_params

        check_params(self.key, self.callable(), self.target, self.params)

    def build(self):
        from fastpipe.targets import instantiate

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
