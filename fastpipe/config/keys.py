"""Which keys a composed config may hold, judged when it is converted (``to_settings``).

A closed group with several choices (``data``, ``launcher``) is registered with its schemas open, so
that an experiment's ``data.num_workers: 0`` composes under ``data=mmap`` too: a sweep over ``data=``
then runs every loader. At conversion a key of *another* choice of the group is dropped for this one,
with a note (printed as a warning and kept in metrics.json's ``warnings``); a key no choice has, or
one added with ``+`` to any of fastpipe's schemas, is refused, naming the schema's keys.

Every node composes strictly otherwise: a misspelt ``train.*`` key gets Hydra's own error. A key that
fastpipe 0.1 spelled differently (``OLD_SPELLINGS``) gets one more line, naming today's spelling
(``old_spelling_note``, printed by the entry point after Hydra's message).
"""
from __future__ import annotations

import dataclasses
import difflib
from typing import Dict, List, Mapping, Optional, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

from fastpipe.errors import ConfigError


def schema_node(kind: type, open_keys: bool) -> DictConfig:
    """The structured node registered for a schema; ``open_keys``: it also composes keys it lacks
    (another choice's), which ``drop_other_choices_keys`` then settles."""
    node = OmegaConf.structured(kind)
    if open_keys:
        OmegaConf.set_struct(node, False)
    return node


def field_names(kind: type) -> List[str]:
    return [f.name for f in dataclasses.fields(kind)]


def drop_other_choices_keys(cfg: DictConfig, schemas: Mapping[str, Dict[str, type]]) -> List[str]:
    """Delete from ``cfg`` (in place) each key that belongs to another choice of its group, and return
    a note for each: ``data.num_workers=0 does not apply to data=mmap (a key of data=default): ignored``."""
    notes = []
    for group, kinds in schemas.items():
        node = cfg._get_node(group) if group in cfg else None
        if len(kinds) < 2 or not isinstance(node, DictConfig) or node._is_missing() or node._is_none():
            continue
        kind = OmegaConf.get_type(node)
        if not dataclasses.is_dataclass(kind):
            continue
        own = set(field_names(kind))
        for key in [k for k in node.keys() if k not in own]:
            owners = _choice_names(group, [name for name, other in kinds.items() if key in field_names(other)])
            if owners:
                notes.append(f"{group}.{key}={node[key]} does not apply to {group}={node.get('name', kind.__name__)} "
                             f"(a key of {' and '.join(f'{group}={o}' for o in owners)}): ignored for this run")
                with open_dict(node):
                    del node[key]
    return notes


def _choice_names(group: str, schema_names: List[str]) -> List[str]:
    """The choices whose schemas are ``schema_names`` (precision's fp32 and amp share one), by the registry."""
    from fastpipe.config import registry

    if group not in registry.CLOSED_GROUPS:
        return schema_names
    return [c for c in registry.names(group)
            if (registry.choice(group, c).schema_name or c) in schema_names] or schema_names


def refuse_added_keys(node: DictConfig, path: str = "") -> None:
    """A key one of fastpipe's schemas lacks (``+train.epoch=3``, or ``data.num_worker=0`` on an open
    loader schema) would be dropped silently when converting: refuse it, naming the schema's keys."""
    kind = OmegaConf.get_type(node)
    if dataclasses.is_dataclass(kind):
        known = set(field_names(kind))
        extra = sorted(k for k in node.keys() if k not in known)
        if extra:
            nearest = difflib.get_close_matches(extra[0], sorted(known), n=1)
            near = f"the nearest: {path}{nearest[0]}; " if nearest else ""
            raise ConfigError(f"{path}{extra[0]} is not a key of {kind.__name__} ({near}its keys: "
                              f"{', '.join(sorted(known))}); fix the spelling")
    for key in node.keys():
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            refuse_added_keys(child, f"{path}{key}.")


# fastpipe 0.1's spellings -> today's (a prefix: ``model.kwargs.width=8`` is ``model.width=8``).
OLD_SPELLINGS = {
    "train.lr": "optimizer.lr",
    "train.optimizer": "optimizer",
    "train.momentum": "optimizer.momentum",
    "train.weight_decay": "optimizer.weight_decay",
    "train.lr_schedule": "lr_schedule",
    "train.lr_warmup_steps": "lr_schedule.warmup_steps",
    "model.kwargs": "model",
    "dataset.name": "dataset",
}
# Modules that moved into packages: a ``_target_`` under the old path is under the new one.
MOVED_MODULES = {"fastpipe.tasks.": "fastpipe.stages.tasks.", "fastpipe.schedules.": "fastpipe.stages.schedules."}


def _renamed(text: str, renames: Mapping[str, str]) -> Optional[str]:
    """``text`` with the first of ``renames``' prefixes it starts with (a whole dotted part) renamed;
    None when it starts with none."""
    for old, new in renames.items():
        if text == old or text.startswith(old if old.endswith(".") else f"{old}."):
            return new + text[len(old):]
    return None


def old_spelling_note(overrides: Sequence[str]) -> Optional[str]:
    """One line naming today's spelling of each old key (or moved ``_target_`` module) among the command
    line's ``overrides``; None when there is none."""
    fixes = []
    for override in overrides:
        key, eq, value = override.lstrip("+").partition("=")
        new_key = _renamed(key, OLD_SPELLINGS)
        new_value = _renamed(value, MOVED_MODULES) if eq else None
        if new_key is not None or new_value is not None:
            fixes.append(f"use {new_key or key}{eq}{new_value or value} instead of {override}")
    return f"{'old spellings' if len(fixes) > 1 else 'an old spelling'}: {'; '.join(fixes)}" if fixes else None


def current_target(target: str) -> str:
    """``target`` under its module's current path (``fastpipe.tasks.X`` is ``fastpipe.stages.tasks.X``)."""
    return _renamed(target, MOVED_MODULES) or target
