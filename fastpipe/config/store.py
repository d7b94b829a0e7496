"""What Hydra is given and what it tells back: the packaged conf/ folder, the schemas registered with
its ConfigStore (the root's and each group choice's, named ``schema_<name>``), each group's choice, and
``to_settings``: the composed DictConfig converted to the dataclasses (``Config``) once, at the edge;
nothing past it sees Hydra.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Dict, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from fastpipe.config import keys, registry
from fastpipe.config.logger import SCHEMAS as LOGGER_SCHEMAS, logger_choice
from fastpipe.config.profile import ProfileConfig
from fastpipe.config.root import GROUPS, Config
from fastpipe.errors import ConfigError, FastpipeError


def config_dir() -> str:
    """The packaged conf/: fastpipe/conf when installed, ../conf in a source checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "conf", here.parent / "conf"):
        if (candidate / "config.yaml").is_file():
            return str(candidate)
    raise FileNotFoundError("fastpipe's conf/ folder is missing from the installation; reinstall fastpipe")


_registered: list = []  # the schemas last registered, by group: the same again is a no-op


def register_configs() -> None:
    """Register the root schema and each group's schemas (named ``schema_<name>``); again only once a
    choice was registered since (a project's own, config/registry.py)."""
    schemas, cs = group_schemas(), ConfigStore.instance()
    if _registered == [schemas] and "fastpipe_schema.yaml" in cs.repo:  # the store may have been reset since
        return
    _registered[:] = [schemas]
    cs.store(name="fastpipe_schema", node=root_schema())
    for group, kinds in schemas.items():
        for name, kind in kinds.items():  # a group of several schemas takes their keys (config/keys.py)
            node = keys.schema_node(kind, open_keys=len(kinds) > 1)
            cs.store(group=group, name=registry.SCHEMA_PREFIX + name, node=node)
    for name, node in LOGGER_SCHEMAS.items():  # each logger's keys under its own name: several compose
        cs.store(group="logger", name=registry.SCHEMA_PREFIX + name, node=node)


def root_schema() -> DictConfig:
    """The root config's structured node."""
    return OmegaConf.structured(Config)


def group_schemas() -> Dict[str, Dict[str, type]]:
    """``{group: {schema name: schema}}``: the closed groups' from their registry (choices a project
    registered included), and the profile group's."""
    return {
        **{group: registry.schemas(group) for group in registry.CLOSED_GROUPS},
        "profile": {"profile": ProfileConfig},
    }


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


def to_settings(cfg: DictConfig, choices: Optional[Dict[str, str]] = None, check: bool = True) -> Config:
    """Convert the composed config to dataclasses (running every schema's validation); with ``check``
    also import each ``_target_`` and check its keys and the combination (``Config.check``). ``cfg``
    itself is left as it is."""
    cfg = copy.deepcopy(cfg)
    dropped = keys.drop_other_choices_keys(cfg, group_schemas())
    keys.refuse_added_keys(cfg)
    try:
        settings = OmegaConf.to_object(cfg)
    except FastpipeError:  # a schema's own message, or a stop signal (Preempted) that landed here
        raise
    except Exception as exc:  # OmegaConf's own messages name the key; keep them
        raise ConfigError(str(exc).splitlines()[0]) from exc
    settings.dropped_keys = dropped
    settings.choices = dict(choices or {})
    if check:
        settings.check()
    return settings
