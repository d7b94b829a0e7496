"""The ``dataset`` group built: a project's callable -> ``DataSplits`` (train and held-out splits + facts).

A dataset callable returns a map-style ``torch.utils.data.Dataset`` (fastpipe holds out a stable
``dataset.val_fraction`` of it, by a hash of each sample's index), a dict ``{"train": ds, "val": ds}``
(``"test"`` too, optionally), or fastpipe's own ``SyntheticData``. A sample is ``(input, target)``;
each may be a tensor, a number, or a tuple / dict of them.
"""
from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

import torch
from torch.utils.data import Dataset, Subset

from fastpipe.config import DatasetConfig
from fastpipe.data.images import ImageFiles
from fastpipe.data.streams import epoch_length, is_stream
from fastpipe.data.synthetic import SyntheticData
from fastpipe.errors import ConfigError, DataError
from fastpipe.runtime import Runtime


def is_held_out(index: int, fraction: float) -> bool:
    """Sample ``index`` belongs to the held-out split: a hash of the index, so the split stays the
    same on every machine and as a dataset grows (new indices never move old ones)."""
    return zlib.crc32(int(index).to_bytes(8, "little")) % 10_000 < fraction * 10_000


def hash_split(dataset: Dataset, fraction: float):
    """(train, val) Subsets of ``dataset`` by ``is_held_out``."""
    held = [is_held_out(i, fraction) for i in range(len(dataset))]
    train = [i for i, h in enumerate(held) if not h]
    val = [i for i, h in enumerate(held) if h]
    return Subset(dataset, train), Subset(dataset, val)


def _base(dataset):
    """The dataset a Subset wraps (its attributes, e.g. ``num_classes``, live there)."""
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return dataset


def describe_value(value: Any) -> str:
    """``float32[3, 32, 32]``, ``int64``, ``(a, b)``, ``{k: ...}``: a sample's structure in one line."""
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).replace('torch.', '')}{list(value.shape)}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(describe_value(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {describe_value(v)}" for k, v in value.items()) + "}"
    return type(value).__name__


@dataclass
class DataSplits:
    """What the loaders and the model need from the built dataset."""

    name: str
    train: Any  # a map-style Dataset, or SyntheticData
    val: Optional[Dataset]
    test: Optional[Dataset] = None
    collate_fn: Optional[Callable] = None
    identity: str = ""  # the config that built it (a records pack's cache key)

    @property
    def is_synthetic(self) -> bool:
        return isinstance(self.train, SyntheticData)

    @property
    def is_images(self) -> bool:
        """Image files with labels (ImageFiles): every loader, DALI included, can read them."""
        return isinstance(self.train, ImageFiles) and isinstance(self.val, ImageFiles)

    def fact(self, name: str):
        """``num_classes``, ``vocab_size``, ``seq_len``, ``corpus_baselines``...: the dataset's own attribute."""
        for split in (self.train, self.val):
            value = getattr(_base(split), name, None) if split is not None else None
            if value is not None:
                return value
        return None

    def model_kwargs(self) -> Dict[str, Any]:
        """The facts a model callable receives when it takes them (num_classes, vocab_size, seq_len)."""
        from fastpipe.config.objects import MODEL_RUNTIME_KEYS

        return {k: v for k in MODEL_RUNTIME_KEYS if (v := self.fact(k)) is not None}

    def first(self, samples: int) -> "DataSplits":
        """These splits cut to the first ``samples`` training samples, held out too (train.overfit_batches)."""
        if self.is_synthetic or is_stream(self.train):
            raise ConfigError(f"train.overfit_batches needs a map-style dataset; dataset={self.name} is "
                              f"{'generated on the device' if self.is_synthetic else 'a stream'}: drop train.overfit_batches")
        if len(self.train) < samples:
            raise DataError(f"train.overfit_batches needs {samples} training samples, but dataset={self.name} has "
                            f"{len(self.train)}; lower train.overfit_batches or train.batch_size")
        if isinstance(self.train, ImageFiles):  # still image files: the loaders decode and normalise them as such
            t = self.train
            first = ImageFiles(t.files[:samples], t.labels[:samples], t.classes, t.image_size, t.augment, t.root,
                               t.transform)
        else:
            first = Subset(self.train, range(samples))
        return DataSplits(self.name, first, first, None, self.collate_fn, f"{self.identity}|first {samples}")

    def describe(self) -> str:
        if is_stream(self.train):
            return f"{self.name}  a stream (IterableDataset)  samples/epoch={epoch_length(self.train, self.name)}"
        if self.is_synthetic:
            return f"{self.name}  {self.train.describe()}"
        if self.is_images:
            t = self.train
            return (f"{self.name}  root={t.root}  classes={t.num_classes}  train={len(t)}  val={len(self.val)}  "
                    f"image_size={t.image_size}  augment={t.augment}")
        sample = describe_value(self.train[0][0]), describe_value(self.train[0][1])
        val = "none" if self.val is None else len(self.val) if hasattr(self.val, "__len__") else "a stream"
        return f"{self.name}  train={len(self.train)}  val={val}  input={sample[0]}  target={sample[1]}"


def _check_sample(name: str, dataset) -> None:
    if len(dataset) == 0:
        raise DataError(f"dataset={name} gives an empty training split; check the dataset's settings")
    sample = dataset[0]
    if not isinstance(sample, (tuple, list)) or len(sample) != 2:
        raise ConfigError(f"dataset={name}: a sample must be (input, target), but sample 0 is "
                          f"{describe_value(sample)}; return a pair from __getitem__")


def build_dataset(cfg: DatasetConfig, runtime: Runtime, name: str, progress: bool = False) -> DataSplits:
    """Instantiate ``cfg`` and split what it returns (see the module docstring)."""
    built = cfg.build(cache_root=runtime.cache_root, cpu_threads=runtime.cpu_cores, progress=progress,
                      val_fraction=cfg.val_fraction)
    collate = cfg.build_collate()
    if isinstance(built, SyntheticData):
        return DataSplits(name, built, None)
    if isinstance(built, dict):
        unknown = sorted(set(built) - {"train", "val", "test"})
        if "train" not in built or unknown:
            raise ConfigError(f"dataset._target_={cfg.target!r} returned a dict with keys {sorted(built)}; use "
                              "'train' (required), 'val' and 'test'")
        train, val, test = built["train"], built.get("val"), built.get("test")
        if val is None and not is_stream(train):
            train, val = hash_split(train, cfg.val_fraction)
    elif is_stream(built):
        raise ConfigError(f"dataset._target_={cfg.target!r} returned a stream (an IterableDataset), which cannot be "
                          "split by index: return {'train': stream, 'val': a held-out Dataset or stream}")
    elif isinstance(built, Dataset) and hasattr(built, "__getitem__"):
        train, val = hash_split(built, cfg.val_fraction)
        test = None
    else:
        raise ConfigError(f"dataset._target_={cfg.target!r} returned {type(built).__name__}; return a map-style "
                          "torch.utils.data.Dataset, or a dict {'train': Dataset, 'val': Dataset}")
    for split in (train, val, test):
        if split is not None and not (is_stream(split) or (isinstance(split, Dataset) and hasattr(split, "__len__"))):
            raise ConfigError(f"dataset._target_={cfg.target!r} gave a split of type {type(split).__name__}; "
                              "each split must be a torch.utils.data.Dataset (map-style, or an IterableDataset)")
    if is_stream(train):
        epoch_length(train, name)  # refused at once when a stream has no length
    else:
        _check_sample(name, train)
    identity = json.dumps([cfg.target, cfg.params, cfg.val_fraction, getattr(_base(train), "fingerprint", None)],
                          sort_keys=True, default=str)
    return DataSplits(name, train, val, test, collate, identity)
