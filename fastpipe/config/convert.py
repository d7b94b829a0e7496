"""``to_settings``: the composed DictConfig converted to the dataclasses (``Config``) once, at the edge;
nothing past it sees Hydra."""
from __future__ import annotations

import copy
from typing import Dict, Optional

from omegaconf import DictConfig, OmegaConf

from fastpipe.config import keys
from fastpipe.config.root import Config
from fastpipe.config.store import group_schemas
from fastpipe.errors import ConfigError, FastpipeError


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
