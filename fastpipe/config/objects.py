"""The groups a project supplies by ``_target_``: ``dataset``, ``model``, ``task`` and ``optimizer``.

Each config is a ``_target_`` plus that callable's own keyword arguments, which fastpipe does not
know: they are checked against the callable's signature when the config is read, so a typo fails
at once, naming the key. fastpipe owns a few keys in these groups (``OWN_KEYS``); every other key
goes to the callable (docs/project.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, Optional

from fastpipe.errors import ConfigError

# Keywords fastpipe passes at run time to a callable that accepts them (and whose config does not
# set them): from the dataset to the model, from the runtime to the dataset.
MODEL_RUNTIME_KEYS = ("num_classes", "vocab_size", "seq_len")
DATASET_RUNTIME_KEYS = ("cache_root", "cpu_threads", "progress", "val_fraction")
OPTIMIZER_RUNTIME_KEYS = ("params", "fused")
SCHEDULE_RUNTIME_KEYS = ("optimizer", "total_steps", "T_max")

@dataclass
class ObjectConfig:
    """A ``_target_`` and its keyword arguments (``params``, nested ``_target_`` s included)."""

    target: str = ""  # the callable that builds it, pkg.module.Name (the config's _target_; docs/project.md)
    params: Dict[str, Any] = field(default_factory=dict)  # the callable's keyword arguments (the other keys)

    GROUP: ClassVar[str] = ""
    OWN_KEYS: ClassVar[tuple] = ()  # fastpipe's own keys in this group (fields of the subclass)
    RUNTIME_KEYS: ClassVar[tuple] = ()  # keywords fastpipe supplies when the callable takes them

    @classmethod
    def from_node(cls, node: Any) -> "ObjectConfig":
        """From the composed group node (a dict after ``OmegaConf.to_object``)."""
        if isinstance(node, cls):
            return node
        if not isinstance(node, dict):
            raise ConfigError(f"{cls.GROUP}: expected a config with a _target_, got {node!r}")
        node = dict(node)
        target = node.pop("_target_", None)
        if not target:
            raise ConfigError(f"the {cls.GROUP} config has no _target_; give {cls.GROUP}._target_=pkg.module.Callable "
                              f"(or choose a built-in: {cls.GROUP}=NAME)")
        own = {k: node.pop(k) for k in cls.OWN_KEYS if k in node}
        return cls(target=str(target), params=node, **own)

    @property
    def key(self) -> str:
        return f"{self.GROUP}._target_"

    def callable(self):
        from fastpipe.instantiate import import_target

        return import_target(self.key, self.target)

    def check_keys(self) -> None:
        """Import the target and check the keys against its signature."""
        from fastpipe.instantiate import check_params

        check_params(self.GROUP, self.callable(), self.target, self.params, supplied=self.RUNTIME_KEYS)

    def check(self) -> None:
        """``check_keys``, then the callable's own ``check_config`` (which may look at files, folders)."""
        self.check_keys()
        fn = self.callable()
        checker = getattr(fn, "check_config", None)
        if callable(checker):
            checker(self.params)  # the callable's own early validation (raises ConfigError)

    def build(self, **runtime_kwargs):
        """Instantiate with ``hydra.utils.instantiate`` (nested containers as plain lists and dicts)."""
        from fastpipe.instantiate import instantiate

        params = dict(self.params)
        params.setdefault("_convert_", "all")
        return instantiate(self.GROUP, self.target, params, **runtime_kwargs)

    def declared(self, name: str, default=None):
        """A class-level declaration of the target (e.g. a dataset's ``sample_kind``), without building it."""
        value = getattr(self.callable(), name, default)
        return value(self.params) if callable(value) and not isinstance(value, type) else value

    @property
    def short_name(self) -> str:
        return self.target.rpartition(".")[2]


@dataclass
class ModelConfig(ObjectConfig):
    """model: an ``nn.Module`` class or factory."""

    activation_checkpointing: bool = False  # recompute each block's activations in backward (less memory)

    GROUP: ClassVar[str] = "model"
    OWN_KEYS: ClassVar[tuple] = ("activation_checkpointing",)
    RUNTIME_KEYS: ClassVar[tuple] = MODEL_RUNTIME_KEYS


@dataclass
class DatasetConfig(ObjectConfig):
    """dataset: a callable returning a map-style Dataset, or {"train": ..., "val": ...}."""

    # Held-out share when the dataset gives one Dataset: a sample is held out by a stable hash of
    # its index (the same split on every machine and as the dataset grows).
    val_fraction: float = 0.2
    # A callable that collates a list of samples into a batch (a _target_ with _partial_: true);
    # null = torch's default_collate.
    collate_fn: Optional[Dict[str, Any]] = None

    GROUP: ClassVar[str] = "dataset"
    OWN_KEYS: ClassVar[tuple] = ("val_fraction", "collate_fn")
    RUNTIME_KEYS: ClassVar[tuple] = DATASET_RUNTIME_KEYS

    def __post_init__(self) -> None:
        if not 0.0 < self.val_fraction < 1.0:
            raise ConfigError(f"dataset.val_fraction={self.val_fraction} must lie in (0, 1)")
        if self.collate_fn is not None and not (isinstance(self.collate_fn, dict) and self.collate_fn.get("_target_")):
            raise ConfigError(f"dataset.collate_fn={self.collate_fn!r}: give a _target_ with _partial_: true, "
                              "or null for torch's default collate")

    def build_collate(self):
        """The collate function, or None for torch's default."""
        if self.collate_fn is None:
            return None
        from fastpipe.instantiate import instantiate

        params = {k: v for k, v in self.collate_fn.items() if k != "_target_"}
        return instantiate("dataset.collate_fn", self.collate_fn["_target_"], params)


@dataclass
class TaskConfig(ObjectConfig):
    """task: the objective, a class with ``loss``, ``metrics``, ``primary`` and ``higher_is_better``."""

    GROUP: ClassVar[str] = "task"


@dataclass
class OptimizerConfig(ObjectConfig):
    """optimizer: a torch.optim optimizer (or a project's own) with ``_partial_: true``. Its ``lr`` may be
    ``auto``: found by a range test before training (finders/lr_range.py; ``train.lr_find_*``)."""

    # optimizer.lr=auto: the found rate times this (a sweep varies it: +sweep=lr); 1.0 = the rule's rate.
    lr_auto_factor: float = 1.0

    GROUP: ClassVar[str] = "optimizer"
    OWN_KEYS: ClassVar[tuple] = ("lr_auto_factor",)
    RUNTIME_KEYS: ClassVar[tuple] = OPTIMIZER_RUNTIME_KEYS

    def __post_init__(self) -> None:
        lr = self.params.get("lr")
        if isinstance(lr, str) and lr != "auto":
            raise ConfigError(f"optimizer.lr={lr!r} is not valid; give a number, or auto (found by a range test)")
        if isinstance(self.lr_auto_factor, bool) or not isinstance(self.lr_auto_factor, (int, float)) \
                or not self.lr_auto_factor > 0:
            raise ConfigError(f"optimizer.lr_auto_factor={self.lr_auto_factor!r} must be a number > 0 (it multiplies "
                              "the rate optimizer.lr=auto finds)")

    @property
    def lr_auto(self) -> bool:
        """optimizer.lr=auto: the rate is found by a range test before training."""
        return self.params.get("lr") == "auto"

    def refuse_auto_with(self, launcher: str, shards: bool) -> None:
        """optimizer.lr=auto under a launcher that shards the model (``shards``): refused in one line."""
        if self.lr_auto and shards:
            raise ConfigError(f"optimizer.lr=auto with launcher={launcher}: the range test is not supported for a "
                              "sharded model; find the rate with launcher=ddp at the same global batch and set "
                              "optimizer.lr=RATE")


@dataclass
class LrScheduleConfig(ObjectConfig):
    """lr_schedule: a fastpipe schedule (a function of the step) or a torch scheduler (``_partial_: true``)."""

    GROUP: ClassVar[str] = "lr_schedule"
    RUNTIME_KEYS: ClassVar[tuple] = SCHEDULE_RUNTIME_KEYS


OBJECT_GROUPS = {"dataset": DatasetConfig, "model": ModelConfig, "task": TaskConfig, "optimizer": OptimizerConfig,
                 "lr_schedule": LrScheduleConfig}
