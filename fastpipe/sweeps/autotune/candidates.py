"""What autotune may change, and which bound each change relieves (docs/autotune.md, "The bound table").

A closed group's choices declare it where they are registered (``relieves=`` in fastpipe/config/); keys
that are not groups have their table here, ``KEYS``. ``hydra.sweeper.space`` (a key -> comma-separated
values dict, like ``params``) limits a key to its values or adds a key; ``hydra.sweeper.fixed`` keeps
keys out. A value's bounds come from the registry or the table; a key of the space in neither is tried
for every bound, after the known ones, and set with ``++`` (added where the config lacks it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from fastpipe.config.registry import choice, names
from fastpipe.sweeps.autotune.bounds import BOUNDS

GROUPS = ("data", "compile", "precision")  # the groups autotune changes (a launcher is where the job runs, not a speed knob)
# key -> (the values tried, the bounds they relieve, first the one they are for)
KEYS: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {
    "train.batch_size": (("auto",), ("memory", "host")),  # the largest batch the memory holds (its search)
    "data.decode_workers": (("auto",), ("data",)),  # data=mmap/dali's decoding processes, one per spare core
    "data.num_workers": (("auto",), ("data",)),  # data=default's loader processes
    "runtime.channels_last": (("true",), ("compute",)),  # NHWC: cuDNN's and Inductor's faster convolutions
}
KEY_GROUP = {"data.decode_workers": ("mmap", "dali"), "data.num_workers": ("default",)}  # where a key applies


@dataclass(frozen=True)
class Candidate:
    """One change: ``key=value``, and the bounds it relieves (the first is what it is for)."""

    key: str
    value: str
    relieves: Tuple[str, ...]

    @property
    def override(self) -> str:
        """The command-line override: a key of the space beyond the table is set whether or not the config has it."""
        known = self.key in GROUPS or self.key in KEYS
        return f"{'' if known else '++'}{self.key}={self.value}"


def catalogue(device: str, space: Optional[Dict[str, str]] = None) -> List[Candidate]:
    """Every change autotune may try on ``device`` (cpu, cuda): the groups' registered choices that run there
    and are installed, and ``KEYS``; ``space`` limits or extends them (module docstring)."""
    space = {k: [v.strip() for v in str(values).split(",") if v.strip()] for k, values in (space or {}).items()}
    found: List[Candidate] = []
    for group in GROUPS:
        for name in space.get(group, names(group)):
            c = choice(group, name)  # an unknown name in the space: one line naming the registered ones
            if device in c.devices and (c.requires is None or c.requires.installed()) and c.relieves:
                found.append(Candidate(group, name, c.relieves))
    for key, (values, relieves) in KEYS.items():
        found += [Candidate(key, v, relieves) for v in space.get(key, values)]
    for key in space:
        if key not in GROUPS and key not in KEYS:
            found += [Candidate(key, v, BOUNDS) for v in space[key]]
    return found


def propose(bound: str, headroom: bool, current: Dict[str, str], everything: Sequence[Candidate],
            fixed: Iterable[str] = (), tried: Iterable[str] = ()) -> List[Candidate]:
    """The changes to try for ``bound``, best expected first: those made for it, then those that relieve it
    too, then (with memory ``headroom``) those made for memory (the batch size); none of a ``fixed`` key,
    none equal to the ``current`` value (key -> value as composed), none in ``tried``."""
    fixed, tried = set(fixed), set(tried)

    def useful(c: Candidate) -> bool:
        applies = c.key not in KEY_GROUP or current.get("data") in KEY_GROUP[c.key]
        wanted = bound in c.relieves or (headroom and c.relieves[0] == "memory")
        return c.key not in fixed and str(current.get(c.key)) != c.value and c.override not in tried and applies \
            and wanted

    def rank(c: Candidate) -> tuple:
        return (0, c.relieves.index(bound)) if bound in c.relieves else (1, 0)

    return sorted((c for c in everything if useful(c)), key=rank)  # stable: the catalogue's order within a rank
