"""Every key has its meaning in one place, the comment beside its schema's field, which --help reads."""
from __future__ import annotations

import dataclasses
import typing

from fastpipe.config import Config, TrainConfig
from fastpipe.config.logger import SCHEMAS as LOGGER_SCHEMAS
from fastpipe.config.meanings import first_sentence, meaning
from fastpipe.config.objects import OBJECT_GROUPS
from fastpipe.config.store import group_schemas


def schemas():
    """Every schema whose keys a user sets: the root and its nested nodes, each group's schemas and the
    loggers', and fastpipe's own keys of the _target_ groups."""
    found = [Config] + [kind for kind in typing.get_type_hints(Config).values() if dataclasses.is_dataclass(kind)]
    found += [kind for kinds in group_schemas().values() for kind in kinds.values()]
    found += [kind for kinds in LOGGER_SCHEMAS.values() for kind in kinds.values()]
    return [kind for kind in found if kind.__module__.startswith("fastpipe.")]  # not a test's own (data=toy)


def test_every_key_of_every_schema_has_a_meaning():
    missing = [f"{kind.__name__}.{f.name}" for kind in schemas() for f in dataclasses.fields(kind)
               if f.name != "_target_" and not meaning(kind, f.name)]  # a logger's _target_: its class
    missing += [f"{kind.__name__}.{key}" for kind in OBJECT_GROUPS.values() for key in ("target", *kind.OWN_KEYS)
                if not meaning(kind, key)]
    assert missing == [], "add a comment beside each of these fields: its meaning, printed by --help"


def test_the_meaning_is_the_first_sentence_outside_brackets():
    assert first_sentence("a cap (e.g. 3; or 4). null = none") == "a cap (e.g. 3; or 4)"
    assert first_sentence("the rate, e.g. 0.5 (Goyal et al. 2017); null = off") == "the rate, e.g. 0.5 (Goyal et al. 2017)"
    assert meaning(Config, "seed") == "each rank seeds Python, NumPy and torch with seed + rank"
    assert meaning(TrainConfig, "ema_decay").startswith("an exponential moving average")
