"""A finished run's settings again, from its ``.hydra/config.yaml``."""
from __future__ import annotations

from pathlib import Path

from fastpipe.config.keys import OLD_SPELLINGS, current_target
from fastpipe.errors import ConfigError

# What older run folders recorded that is no setting today, dropped when their config is read back: the
# run's facts (in metrics.json now), a removed report key, and fastpipe 0.1's train keys (null in such
# records; a value they held set the optimizer, which loading and evaluating a run do not build).
OLD_RECORD_KEYS = ("overrides", "choices", "run_id", "report.unreached_penalty",
                   *(key for key in OLD_SPELLINGS if key.startswith("train.")))


def run_settings(run_dir: Path, overrides=()):
    """A run's settings from its ``.hydra/config.yaml`` (plus ``KEY=VALUE`` overrides), each group typed by
    its schema again; the ``_target_`` s are not imported until something is built."""
    from omegaconf import DictConfig, OmegaConf

    from fastpipe.config import keys
    from fastpipe.config.store import to_settings
    from fastpipe.config.store import group_schemas, register_configs, root_schema

    path = Path(run_dir) / ".hydra" / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a fastpipe run folder (no .hydra/config.yaml); give a folder "
                          "that `python -m fastpipe` wrote")
    register_configs()
    record = OmegaConf.merge(today_spelled(OmegaConf.load(path)), OmegaConf.from_dotlist(list(overrides)))
    for group, schemas in group_schemas().items():  # the group's one schema, or the schema of the recorded choice
        node = record.get(group)
        if not isinstance(node, DictConfig):
            continue
        kind = next(iter(schemas.values())) if len(schemas) == 1 else _schema_of(group, node.get("name"))
        if kind is not None:
            record[group] = OmegaConf.merge(keys.schema_node(kind, open_keys=len(schemas) > 1), node)
    return to_settings(OmegaConf.merge(root_schema(), record), check=False)


def today_spelled(record):
    """A run's recorded config (a DictConfig, changed in place) without ``OLD_RECORD_KEYS`` and with each
    group's ``_target_`` under its module's current path."""
    from omegaconf import DictConfig, OmegaConf, open_dict

    for dotted in OLD_RECORD_KEYS:
        parent, _, key = dotted.rpartition(".")
        node = OmegaConf.select(record, parent) if parent else record
        if isinstance(node, DictConfig) and key in node:
            with open_dict(node):
                del node[key]
    for group in record:
        node = record[group]
        if isinstance(node, DictConfig) and isinstance(node.get("_target_"), str):
            node["_target_"] = current_target(node["_target_"])
    return record


def _schema_of(group: str, name) -> object:
    """The schema of the recorded choice ``group=name`` (choices may share one: precision's fp32 and amp),
    or None for a choice no longer registered."""
    from fastpipe.config import registry

    return registry.choice(group, name).schema if name in registry.names(group) else None
