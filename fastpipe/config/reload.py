"""A finished run's settings again, from its ``.hydra/config.yaml``."""
from __future__ import annotations

from pathlib import Path

from fastpipe.errors import ConfigError

def run_settings(run_dir: Path, overrides=()):
    """A run's settings from its ``.hydra/config.yaml`` (plus ``KEY=VALUE`` overrides), each group typed by
    its schema again; the ``_target_`` s are not imported until something is built."""
    from omegaconf import OmegaConf

    from fastpipe.config import Config, group_schemas, register_configs, to_settings

    path = Path(run_dir) / ".hydra" / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a fastpipe run folder (no .hydra/config.yaml); give a folder "
                          "that `python -m fastpipe` wrote")
    register_configs()
    record = OmegaConf.merge(OmegaConf.load(path), OmegaConf.from_dotlist(list(overrides)))
    for group, schemas in group_schemas().items():  # a group node typed by the schema of its choice
        node = record.get(group)
        name = node.get("name") if node is not None and hasattr(node, "get") else None
        kind = schemas.get(name) or (schemas.get(group) if len(schemas) == 1 and group in ("precision", "compile",
                                                                                             "profile") else None)
        if kind is not None and group not in ("dataset", "model"):
            record[group] = OmegaConf.merge(OmegaConf.structured(kind), node)
    return to_settings(OmegaConf.merge(OmegaConf.structured(Config), record), check=False)

