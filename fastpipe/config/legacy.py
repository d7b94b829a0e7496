"""fastpipe 0.1's spellings, and paths that moved: each still works, with a warning naming the new one.

None of them is a key of a schema, so ``--cfg job`` and ``--help`` never list them. How they get
through Hydra, which refuses a key its structured schema lacks:

- **train.lr, train.lr_schedule, train.lr_warmup_steps** (accepted with a warning) and
  **train.optimizer, train.momentum, train.weight_decay** (refused: "moved to the optimizer group").
  The root schema is registered with its ``train`` node open (``accepting_old_train_keys``: OmegaConf's
  struct flag off on that node alone), so ``train.lr=0.1`` on a command line, in a sweep's list, in
  Hydra's compose API or in a project's YAML composes like any key, with ``train.epochs``' types
  still checked by OmegaConf. ``to_settings`` then takes them out before converting
  (``take_old_train_keys``: typed by ``OldTrainKeys``, so a wrong value gets OmegaConf's own message)
  and applies them to their new homes (``apply_old_train_keys``); any other key the schema lacks is
  refused there with "is not a key of TrainConfig ... fix the spelling", before any job of a run or
  a sweep starts (the price: ``--cfg job train.epoch=3`` prints the misspelt key instead of
  refusing it). Why not another way: rewriting ``sys.argv`` in the entry point misses the compose
  API and YAML files, and a separate legacy node would be printed, as ``--cfg job`` prints every
  composed node.
- **model.kwargs** and **dataset.name** (``defaults: [schema_model]`` / ``[schema_dataset]`` in a
  project's YAML): those groups are open dicts already, so the old schemas stay registered under
  their old names (``SCHEMAS``; ``--help`` hides ``schema_*`` entries) and ``old_object_spelling``
  rewrites the node when it is converted.
- **_target_ paths of modules that moved into packages** (``fastpipe.tasks.Classification`` is
  ``fastpipe.stages.tasks.Classification``): ``moved_target``. A project's config, or a finished run's
  ``.hydra/config.yaml`` read back by ``fastpipe.load``, keeps working.
- **Older run folders** record ``overrides``, ``choices`` and ``run_id`` at their config's root and
  every old train key as null: ``OLD_RECORD_KEYS`` are dropped when one is read back (config/reload.py);
  the null train keys go the way above. Run folders of this version's first time-to-target release
  record ``report.unreached_penalty`` (``OLD_REPORT_KEYS``): dropped the same way.

Each goes in the next release: delete its lines here and the tests that hold it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from omegaconf import MISSING, DictConfig, OmegaConf, open_dict

from fastpipe.config._checks import one_of
from fastpipe.errors import ConfigError

NEXT_RELEASE = "it will be removed in the next release"

# ---------------------------------------------------------------------------------------------- train.*


@dataclass
class OldTrainKeys:
    """The train keys of fastpipe 0.1 (never part of TrainConfig): typed here so a wrong value fails
    with OmegaConf's own message."""

    lr: Optional[float] = None  # -> optimizer.lr
    lr_schedule: Optional[str] = None  # -> lr_schedule=cosine|constant
    lr_warmup_steps: Optional[int] = None  # -> lr_schedule.warmup_steps
    optimizer: Optional[str] = None  # refused: optimizer=NAME
    momentum: Optional[float] = None  # refused: optimizer.momentum
    weight_decay: Optional[float] = None  # refused: optimizer.weight_decay


OLD_TRAIN_KEYS = tuple(f.name for f in dataclasses.fields(OldTrainKeys))
MOVED_TO_OPTIMIZER = {"optimizer": "optimizer={value} (with its lr: optimizer.lr=...)",
                      "momentum": "optimizer.momentum={value}", "weight_decay": "optimizer.weight_decay={value}"}
OLD_SCHEDULES = ("cosine", "constant")


def accepting_old_train_keys(root: DictConfig) -> DictConfig:
    """``root`` (the structured root schema) with its ``train`` node open to keys TrainConfig lacks, so
    the old spellings compose from a command line and from YAML; ``to_settings`` takes them out again."""
    OmegaConf.set_struct(root.train, False)
    return root


def take_old_train_keys(cfg: DictConfig) -> OldTrainKeys:
    """The old train keys' values, deleted from ``cfg``; the keys that moved to the optimizer group are
    refused, naming their new spelling."""
    train = cfg.get("train") if isinstance(cfg, DictConfig) else None
    present = [k for k in OLD_TRAIN_KEYS if isinstance(train, DictConfig) and k in train]
    if not present:
        return OldTrainKeys()
    values = {k: train[k] for k in present}
    try:
        old = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(OldTrainKeys), values))
    except Exception as exc:  # OmegaConf's message names the type; say which key
        key = getattr(exc, "key", None) or present[0]
        raise ConfigError(f"train.{key}={values.get(key)!r}: {str(exc).splitlines()[0]}") from exc
    for key, new in MOVED_TO_OPTIMIZER.items():
        value = getattr(old, key)
        if value is not None:
            raise ConfigError(f"train.{key} moved to the optimizer group: use {new.format(value=value)} "
                              f"instead of train.{key}={value}")
    if old.lr_schedule is not None:
        one_of("train.lr_schedule", old.lr_schedule, OLD_SCHEDULES)
    with open_dict(train):
        for key in present:
            del train[key]
    return old


def apply_old_train_keys(old: OldTrainKeys, settings: Any) -> None:
    """Put the old keys' values where they live now (the optimizer and lr_schedule groups), each with
    its deprecation note on that group (``Config.deprecations``)."""
    optimizer, schedule = settings.optimizer, settings.lr_schedule
    if old.lr is not None and hasattr(optimizer, "params"):
        optimizer.params["lr"] = old.lr
        optimizer.deprecations.append(f"train.lr is deprecated: use optimizer.lr={old.lr:g} ({NEXT_RELEASE})")
    if (old.lr_schedule is None and old.lr_warmup_steps is None) or not hasattr(schedule, "params"):
        return
    if old.lr_schedule is not None:
        schedule = dataclasses.replace(schedule, target=f"fastpipe.stages.schedules.{old.lr_schedule}", params={},
                                       deprecations=list(schedule.deprecations))
    if old.lr_warmup_steps is not None:
        schedule.params["warmup_steps"] = old.lr_warmup_steps
    spelled = " ".join(([f"lr_schedule={old.lr_schedule}"] if old.lr_schedule is not None else []) +
                       ([f"lr_schedule.warmup_steps={old.lr_warmup_steps}"] if old.lr_warmup_steps is not None else []))
    schedule.deprecations.append(f"train.lr_schedule / train.lr_warmup_steps are deprecated: use {spelled} "
                                 "(they will be removed in the next release)")
    settings.lr_schedule = schedule


# ------------------------------------------------------------------------------- model.*, dataset.*

# The built-in datasets of fastpipe < 0.2, chosen by ``name`` instead of a ``_target_``.
LEGACY_DATASETS = {"shapes": "fastpipe.data.images.shapes", "imagefolder": "fastpipe.data.images.image_folder",
                   "synthetic": "fastpipe.data.synthetic.synthetic"}


@dataclass
class LegacyModelSchema:
    """``schema_model`` of fastpipe < 0.2 (``_target_`` + ``kwargs``): old project configs still compose."""

    _target_: str = MISSING
    kwargs: Dict[str, Any] = field(default_factory=dict)
    activation_checkpointing: bool = False


@dataclass
class LegacyDatasetSchema:
    """``schema_dataset`` of fastpipe < 0.2 (a built-in chosen by ``name``): old configs still compose."""

    name: str = MISSING
    root: Optional[str] = None
    image_size: int = 32
    augment: bool = False
    val_fraction: float = 0.2
    num_classes: int = 4
    num_images: int = 2400
    seed: int = 0
    source_size: Optional[List[int]] = None
    collate_fn: Optional[Any] = None


# Registered as model/schema_model and dataset/schema_dataset, the names 0.1's YAML files start from.
SCHEMAS = {"model": {"model": LegacyModelSchema}, "dataset": {"dataset": LegacyDatasetSchema}}


def old_object_spelling(group: str, node: dict, own_keys: tuple) -> Tuple[dict, List[str]]:
    """A ``_target_`` group's node with 0.1's spellings rewritten (``model.kwargs``, ``dataset.name``),
    and the deprecation notes."""
    rewrite = OLD_OBJECT_SPELLINGS.get(group)
    return rewrite(node, own_keys) if rewrite else (node, [])


def _model_kwargs(node: dict, own_keys: tuple) -> Tuple[dict, List[str]]:
    kwargs = node.pop("kwargs", None)
    if not kwargs:
        return node, []
    clash = sorted(set(kwargs) & set(node))
    if clash:
        raise ConfigError(f"model.kwargs.{clash[0]} and model.{clash[0]} are both set; keep model.{clash[0]}")
    node.update(kwargs)
    return node, [f"model.kwargs is deprecated: put the arguments beside _target_ (model.{next(iter(kwargs))}=...); "
                  f"{NEXT_RELEASE}"]


def _dataset_by_name(node: dict, own_keys: tuple) -> Tuple[dict, List[str]]:
    name = node.pop("name", None)
    if node.get("_target_") or name is None:
        return node, []
    if name not in LEGACY_DATASETS:
        raise ConfigError(f"dataset.name={name!r} is not a built-in dataset ({', '.join(LEGACY_DATASETS)}); "
                          "give dataset._target_=pkg.module.Callable")
    from fastpipe.targets import import_target, parameters

    target = LEGACY_DATASETS[name]
    takes = parameters(import_target("dataset._target_", target)) or {}
    node = {k: v for k, v in node.items() if k in takes or k in own_keys}  # the old schema's other keys
    node["_target_"] = target
    return node, [f"dataset.name={name} is deprecated: use dataset={name} (or dataset._target_={target}); "
                  f"{NEXT_RELEASE}"]


OLD_OBJECT_SPELLINGS = {"model": _model_kwargs, "dataset": _dataset_by_name}

# ------------------------------------------------------------------------------------- moved modules

MOVED_TARGET_MODULES = {"fastpipe.tasks": "fastpipe.stages.tasks", "fastpipe.schedules": "fastpipe.stages.schedules"}


def moved_target(key: str, target: str) -> Tuple[str, Optional[str]]:
    """``target`` at its current path, and the warning when it was spelled the old way (else None)."""
    module, _, name = target.rpartition(".")
    new = MOVED_TARGET_MODULES.get(module)
    if new is None:
        return target, None
    return f"{new}.{name}", (f"{key}={target} is deprecated: use {key}={new}.{name} (the module moved; the old path "
                             "will be removed in the next release)")


# --------------------------------------------------------------------------------- old run records

OLD_RECORD_KEYS = ("overrides", "choices", "run_id")  # run facts that older run folders kept in their config
OLD_REPORT_KEYS = ("unreached_penalty",)  # what a miss cost an optimiser: now always more than any hit


def without_old_record_keys(record: DictConfig) -> DictConfig:
    """A run folder's recorded config without the root keys that are run facts now, not settings."""
    with open_dict(record):
        for key in OLD_RECORD_KEYS:
            record.pop(key, None)
    report = record.get("report")
    if isinstance(report, DictConfig):
        with open_dict(report):
            for key in OLD_REPORT_KEYS:
                report.pop(key, None)
    return record
