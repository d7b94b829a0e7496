"""``python -m fastpipe --help``: the config groups and the choices a user can pick, and the composed
config with each key's meaning.

Hydra's own help lists every entry of a group, fastpipe's ``schema_*`` structured configs too; the
template in conf/hydra/help/fastpipe.yaml asks the resolver ``fastpipe_help_groups`` instead, which
lists the same groups (fastpipe's, and a project's through ``--config-dir``) without them, and
``fastpipe_help_config``, which prints the config as ``--cfg job`` does with each key's one-line
meaning beside it, read from the comment beside its field in the schema (config/meanings.py).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterator, List, Optional, Tuple

from omegaconf import DictConfig, OmegaConf

from fastpipe.config.meanings import meaning
from fastpipe.config.objects import OBJECT_GROUPS, ObjectConfig
from fastpipe.config.registry import SCHEMA_PREFIX
from fastpipe.instantiate import HYDRA_KEYS

RESOLVERS = ("fastpipe_help_groups", "fastpipe_help_config")
MEANING_COLUMN = 40  # where the meanings start, unless a key's line is longer


def register_help_resolver() -> None:
    """Make ``${fastpipe_help_groups:}`` and ``${fastpipe_help_config:}`` resolvable (the entry point
    calls this before Hydra composes)."""
    for name, resolver in zip(RESOLVERS, (groups_help, config_help)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)


def group_choices() -> Dict[str, List[str]]:
    """Each config group outside hydra/ (nested ones as ``a/b``) and its choices, from Hydra's search path."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.object_type import ObjectType

    loader = GlobalHydra.instance().config_loader()

    def walk(parent: str) -> Dict[str, List[str]]:
        found = {}
        for name in loader.list_groups(parent):
            group = f"{parent}/{name}" if parent else name
            if group == "hydra":
                continue
            options = [o for o in loader.get_group_options(group, ObjectType.CONFIG) if not o.startswith(SCHEMA_PREFIX)]
            if options:
                found[group] = sorted(options)
            found.update(walk(group))
        return found

    return walk("")


def groups_help(*, _root_: DictConfig) -> str:
    """The groups of the root config (with the chosen choice) and the presets added with ``+``."""
    chosen = _root_.hydra.runtime.choices
    groups = group_choices()
    width = max(map(len, groups), default=0) + 3  # "+", ":" and at least one space before the choices
    picked = [f"  {g + ':':<{width}}{', '.join(options)}   [{chosen[g]}]" for g, options in sorted(groups.items())
              if g in chosen]
    added = [f"  {'+' + g + ':':<{width}}{', '.join(options)}" for g, options in sorted(groups.items()) if g not in chosen]
    text = "== Config groups (GROUP=CHOICE; in brackets the choice of this command line) ==\n" + "\n".join(picked)
    if added:
        text += "\n\n== Presets, added with + (+GROUP=CHOICE; sweeps.md, configuration.md#experiments) ==\n"
        text += "\n".join(added)
    return text + "\n"


def config_help(*, _root_: DictConfig) -> str:
    """The composed config (without ``hydra``) as ``--cfg job`` prints it, each key's meaning beside it."""
    plain = OmegaConf.to_container(_root_, resolve=False)
    plain.pop("hydra", None)
    lines = list(_annotated(plain, _root_, OmegaConf.get_type(_root_), ""))
    column = min(MEANING_COLUMN, max((len(text) for text, note in lines if note), default=0))
    text = "\n".join(f"{text:<{column}}  # {note}" if note else text for text, note in lines) + "\n"
    return text.replace("$", "$$")  # Hydra fills the help template with string.Template: a value's $ stays


def _annotated(plain: Dict[str, Any], node: DictConfig, kind: Optional[type], indent: str
               ) -> Iterator[Tuple[str, Optional[str]]]:
    """``(line, meaning)`` for each line of ``plain``'s YAML; ``node``: the same config, whose schemas
    (``kind``: ``plain``'s) say what each key means."""
    for key, value in plain.items():
        note = _meaning(kind, key, plain)
        child = node._get_node(key)
        if isinstance(value, dict) and value and isinstance(child, DictConfig):
            yield f"{indent}{key}:", note
            schema = OmegaConf.get_type(child)
            if schema is dict and not indent:  # a _target_ group: fastpipe's own keys have a schema
                schema = OBJECT_GROUPS.get(key)
            yield from _annotated(value, child, schema, indent + "  ")
            continue
        first, *rest = OmegaConf.to_yaml({key: value}).splitlines()
        yield f"{indent}{first}", note
        yield from ((f"{indent}{line}", None) for line in rest)


def _meaning(kind: Optional[type], key: str, plain: Dict[str, Any]) -> Optional[str]:
    """``key``'s one-line meaning in a node of schema ``kind``; a ``_target_`` group's other keys are
    its callable's arguments (but Hydra's own: ``_partial_``...)."""
    if key == "_target_":
        return meaning(ObjectConfig, "target")
    if key in HYDRA_KEYS or kind is None or not dataclasses.is_dataclass(kind):
        return None
    if issubclass(kind, ObjectConfig) and key not in kind.OWN_KEYS:
        return f"an argument of {plain.get('_target_', 'the _target_')}"
    return meaning(kind, key)
