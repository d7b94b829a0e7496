"""A finished run's settings again, from its ``.hydra/config.yaml``."""
from __future__ import annotations

from pathlib import Path

from fastpipe.errors import ConfigError


def run_settings(run_dir: Path, overrides=()):
    """A run's settings from its ``.hydra/config.yaml`` (plus ``KEY=VALUE`` overrides), each group typed by
    its schema again; the ``_target_`` s are not imported until something is built."""
    from omegaconf import DictConfig, OmegaConf

    from fastpipe.config import group_schemas, keys, legacy, register_configs, root_schema, to_settings

    path = Path(run_dir) / ".hydra" / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a fastpipe run folder (no .hydra/config.yaml); give a folder "
                          "that `python -m fastpipe` wrote")
    register_configs()
    record = legacy.without_old_record_keys(OmegaConf.load(path))
    record = OmegaConf.merge(record, OmegaConf.from_dotlist(list(overrides)))
    for group, schemas in group_schemas().items():  # the group's one schema, or the schema of the recorded choice
        node = record.get(group)
        if not isinstance(node, DictConfig):
            continue
        kind = next(iter(schemas.values())) if len(schemas) == 1 else _schema_of(group, node.get("name"))
        if kind is not None:
            record[group] = OmegaConf.merge(keys.schema_node(kind, open_keys=len(schemas) > 1), node)
    return to_settings(OmegaConf.merge(root_schema(), record), check=False)


def _schema_of(group: str, name) -> object:
    """The schema of the recorded choice ``group=name`` (choices may share one: precision's fp32 and amp),
    or None for a choice no longer registered."""
    from fastpipe.config import registry

    return registry.choice(group, name).schema if name in registry.names(group) else None
