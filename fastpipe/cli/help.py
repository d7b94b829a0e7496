"""``python -m fastpipe --help``: the config groups and the choices a user can pick.

Hydra's own help lists every entry of a group, fastpipe's ``schema_*`` structured configs too; the
template in conf/hydra/help/fastpipe.yaml asks the resolver ``fastpipe_help_groups`` instead, which
lists the same groups (fastpipe's, and a project's through ``--config-dir``) without them.
"""
from __future__ import annotations

from typing import Dict, List

from omegaconf import DictConfig, OmegaConf

RESOLVER = "fastpipe_help_groups"
SCHEMA_PREFIX = "schema_"  # structured configs a group's YAML files start from: not choices


def register_help_resolver() -> None:
    """Make ``${fastpipe_help_groups:}`` resolvable (the entry point calls this before Hydra composes)."""
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, groups_help)


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
    width = max(map(len, groups), default=0) + 2
    picked = [f"  {g + ':':<{width}}{', '.join(options)}   [{chosen[g]}]" for g, options in sorted(groups.items())
              if g in chosen]
    added = [f"  {'+' + g + ':':<{width}}{', '.join(options)}" for g, options in sorted(groups.items()) if g not in chosen]
    text = "== Config groups (GROUP=CHOICE; in brackets the choice of this command line) ==\n" + "\n".join(picked)
    if added:
        text += "\n\n== Presets, added with + (+GROUP=CHOICE; sweeps.md, configuration.md#experiments) ==\n"
        text += "\n".join(added)
    return text + "\n"
