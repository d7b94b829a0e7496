"""The closed groups' choices (``data``, ``launcher``, ``precision``, ``compile``): each registered once.

A choice is registered with its schema (the dataclass of its keys), its builder and what it
supports; everything that asks "which loader reads this dataset", "does this launcher shard the
model", or "which function builds this precision" asks here, never by comparing names::

    @register("data", "mmap", builder="fastpipe.data.mmap:build_mmap_loader",
              reads=("image_files", "tokens", "samples"))
    @dataclass
    class MmapLoaderConfig: ...

A builder given as ``"package.module:function"`` is imported when first used, so the schemas (this
layer) never import the stages they describe. A project (or a test) registers its own choice the
same way, with the builder itself instead of its path (docs/architecture.md). What a choice must
implement: fastpipe/protocols.py.
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Callable, Dict, NamedTuple, Optional, Tuple, Union

from fastpipe.errors import ConfigError, EnvironmentProblem

CLOSED_GROUPS = ("data", "launcher", "precision", "compile")
DEVICES = ("cpu", "cuda")
# A schema's name in Hydra's ConfigStore: schema_<name>, in its group beside the choices (a config
# file's ``defaults: [schema_<name>]``); never a choice, so no list of choices shows it.
SCHEMA_PREFIX = "schema_"

# What a dataset is, as far as a loader is concerned: a dataset callable declares one (its
# ``data_format`` attribute; undeclared: ``samples``), a loader registers the formats it ``reads``.
# Each text is what a loader that cannot read the format says about it.
DATA_FORMATS = {
    "image_files": "it is image files",  # ImageFiles: dataset=shapes, dataset=imagefolder
    "tokens": "it is a token stream, not image files",  # dataset=tokens (its own memory map)
    "generated": "it is generated on the device and has no files",  # dataset=synthetic
    "samples": "it has no image files to decode",  # any other map-style dataset of (input, target)
}


class Requirement(NamedTuple):
    """A package a choice needs beyond fastpipe's own dependencies: the doctor notes it when missing
    (``--require EXTRA`` makes it a problem), and the config check refuses the choice without it. A
    logger class declares one as its ``requires`` attribute, ``(module, install)``."""

    module: str  # what it imports: nvidia.dali, torchao
    install: str  # what installs it: fastpipe[dali]
    what: str = ""  # in words, for the messages: NVIDIA DALI (default: the module's name)
    instead: str = ""  # the choice to use without it: data=default

    @property
    def extra(self) -> str:
        """The name ``--require`` takes: the extra in ``fastpipe[EXTRA]``, else the module's name."""
        return self.install.partition("[")[2].rstrip("]") or self.module

    def installed(self) -> bool:
        """Whether its module can be found (not imported: importing some costs seconds)."""
        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):  # a parent package that is not there
            return False

    def missing_text(self, who: str) -> str:
        """``who`` needs it, which is not installed: the one line naming the install."""
        return (f"{who} needs {self.what or 'the ' + self.module + ' package'}, which is not installed: "
                f"pip install \"{self.install}\"" + (f" (or use {self.instead})" if self.instead else ""))


@dataclass(frozen=True)
class Choice:
    """One choice of a closed group: its schema, its builder and what it supports."""

    group: str
    name: str
    schema: type
    builder: Union[str, Callable]  # the function that builds it, or "package.module:function"
    schema_name: str = ""  # its ConfigStore entry is schema_<schema_name> (default: the choice's name)
    devices: Tuple[str, ...] = DEVICES  # where it can run
    launchers: Optional[Tuple[str, ...]] = None  # the launchers it works under; None = every one
    requires: Optional[Requirement] = None  # a package it needs beyond fastpipe's dependencies
    reads: Tuple[str, ...] = ()  # data: the DATA_FORMATS it can read
    uses_collate_fn: bool = False  # data: batches are collated by dataset.collate_fn (else the loader's own)
    # data: its builder takes subset=positions, a subset of the held-out split (train.target_eval_samples)
    held_out_subset: bool = False
    streams: bool = False  # data: reads a stream (an IterableDataset), split over its readers by set_shard
    overfit_batches: bool = True  # data: trains on the splits cut to their first batches (train.overfit_batches)
    half: bool = False  # precision: computes in 16 bits or fewer, which lowers memory (the out-of-memory advice)
    process_group: bool = False  # launcher: its workers form a torch.distributed process group
    ddp: bool = False  # launcher: the model trains as a DistributedDataParallel replica
    shards: bool = False  # launcher: parameters, gradients and optimizer state are sharded (FSDP2)
    # what bounds a run that this choice relieves, first what it is for: data, host, compute, memory
    # (hydra/sweeper=autotune tries it where its probe finds that bound: fastpipe/sweeps/autotune/)
    relieves: Tuple[str, ...] = ()

    @property
    def build(self) -> Callable:
        """The builder, imported on first use."""
        if callable(self.builder):
            return self.builder
        module, _, name = self.builder.partition(":")
        return getattr(importlib.import_module(module), name)

    def refuse_unsupported(self, device_type: Optional[str] = None, launcher: Optional[str] = None) -> None:
        """One line when this choice cannot run on ``device_type`` or under ``launcher``."""
        if device_type is not None and device_type not in self.devices:
            raise ConfigError(f"{self.group}={self.name} runs on {' or '.join(self.devices)}, but training runs on "
                              f"{device_type}; choose another {self.group} (or device={self.devices[0]})")
        if launcher is not None and self.launchers is not None and launcher not in self.launchers:
            raise ConfigError(f"{self.group}={self.name} works with launcher={' or launcher='.join(self.launchers)}, "
                              f"not launcher={launcher}; choose another {self.group} or launcher")

    def refuse_missing(self) -> None:
        """One line when the package this choice needs is not installed."""
        if self.requires is not None and not self.requires.installed():
            raise EnvironmentProblem(self.requires.missing_text(f"{self.group}={self.name}"))

    def refuse_format(self, data_format: str, dataset: str) -> None:
        """data: one line when this loader cannot read a dataset of ``data_format``, naming those that can."""
        if data_format in self.reads:
            return
        able = [c.name for c in _CHOICES["data"].values() if data_format in c.reads]
        raise ConfigError(f"data={self.name} cannot read dataset={dataset}: {DATA_FORMATS[data_format]}; use "
                          f"data={' or data='.join(able)}")

    def refuse_stream(self, dataset: str) -> None:
        """data: one line when this loader cannot read ``dataset``, a stream."""
        if not self.streams:
            raise ConfigError(f"data={self.name} reads samples by index, but dataset={dataset} is a stream (an "
                              f"IterableDataset); use data={' or data='.join(having('data', 'streams'))}")

    def refuse_held_out_subset(self) -> None:
        """data: one line when this loader's builder cannot read a subset of the held-out split."""
        if not self.held_out_subset:
            raise ConfigError(f"train.target_eval_samples needs a loader that can read a subset of the held-out split, "
                              f"and data={self.name}'s builder takes no subset: drop train.target_eval_samples")

    def refuse_overfit_batches(self) -> None:
        """data: one line when this loader cannot train on the splits' first batches."""
        if not self.overfit_batches:
            able = having("data", "overfit_batches")
            raise ConfigError(f"train.overfit_batches works with data={' or data='.join(able)}, not data={self.name}; "
                              f"use data={able[0]}")


_CHOICES: Dict[str, Dict[str, Choice]] = {group: {} for group in CLOSED_GROUPS}


def register(group: str, name: str, builder: Union[str, Callable], schema: Optional[type] = None, **supports):
    """Register ``name`` in ``group``: as a decorator of its schema, or with ``schema=`` given.
    ``supports``: the Choice fields (devices, launchers, reads, ...). Registering a name again replaces it."""
    if group not in _CHOICES:
        raise ConfigError(f"{group} is not a closed group ({', '.join(CLOSED_GROUPS)}); open groups take a _target_")
    unknown = sorted(set(supports.get("reads", ())) - set(DATA_FORMATS))
    if unknown:
        raise ConfigError(f"{group}={name} reads {unknown}, which are not data formats ({', '.join(DATA_FORMATS)})")

    def add(kind: type) -> type:
        _CHOICES[group][name] = Choice(group, name, kind, builder, **supports)
        _store(group, _CHOICES[group][name])
        return kind

    return add if schema is None else add(schema)


def _store(group: str, choice: Choice) -> None:
    """The schema in Hydra's ConfigStore, for a config file's ``defaults: [schema_<name>]``."""
    from hydra.core.config_store import ConfigStore

    name = SCHEMA_PREFIX + (choice.schema_name or choice.name)
    ConfigStore.instance().store(group=group, name=name, node=choice.schema)


def choice(group: str, name: str) -> Choice:
    """The registered choice ``group=name``; one line naming the registered ones when there is none."""
    found = _CHOICES[group].get(name)
    if found is None:
        raise ConfigError(f"{group}={name} is not a registered choice; use one of {', '.join(_CHOICES[group])}")
    return found


def names(group: str) -> Tuple[str, ...]:
    """The registered choices of ``group``, in registration order."""
    return tuple(_CHOICES[group])


def having(group: str, field: str) -> Tuple[str, ...]:
    """The registered choices of ``group`` whose ``field`` (a Choice flag) is set, in registration order."""
    return tuple(c.name for c in _CHOICES[group].values() if getattr(c, field))


def lower_precision(name: str) -> Optional[str]:
    """``precision=amp``: the first registered half precision, to suggest when precision=``name`` runs out
    of memory; None when ``name`` is one already (or none is registered)."""
    if choice("precision", name).half:
        return None
    half = having("precision", "half")
    return f"precision={half[0]}" if half else None


def requirements() -> Dict[str, Requirement]:
    """``{"data=dali": Requirement}``: every registered choice that needs a package of its own."""
    return {f"{c.group}={c.name}": c.requires for group in CLOSED_GROUPS for c in _CHOICES[group].values()
            if c.requires is not None}


def schemas(group: str) -> Dict[str, type]:
    """``{schema name: schema}`` of ``group`` (choices that share one schema give one entry)."""
    return {c.schema_name or c.name: c.schema for c in _CHOICES[group].values()}
