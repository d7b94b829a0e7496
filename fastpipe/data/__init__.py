"""The ``data`` group: one module per loader, each registered with its schema (config/registry.py);
``build_loader`` builds the one ``data.name`` names."""
from __future__ import annotations

from typing import Optional

from fastpipe.config import LoaderConfig
from fastpipe.config.registry import choice
from fastpipe.data.streams import is_stream
from fastpipe.errors import ConfigError
from fastpipe.protocols import Loader
from fastpipe.runtime import Runtime


def data_format(splits) -> str:
    """The built dataset's format (config/registry.py's DATA_FORMATS), as the loaders see it."""
    if splits.is_synthetic:
        return "generated"
    return "image_files" if splits.is_images else "samples"


def build_loader(cfg: LoaderConfig, splits, runtime: Runtime, batch_size: int, seed: int, train: bool,
                 channels_last: bool, subset=None) -> Optional[Loader]:
    """A ``Loader`` over ``splits`` (a DataSplits): the registered builder of ``cfg.name``, called with
    the same arguments; None when there is no held-out split. ``subset`` (held-out only): positions in
    the held-out split (in a seeded random order, data/held_out_batches.py) to read in that order instead of all
    of it, shared out over the ranks as the whole split would be (``train.target_eval_samples``); a
    builder registered with ``held_out_subset`` takes it as its ``subset`` keyword. What the registered
    choice cannot read (a format, a stream, a subset) is refused in one line."""
    loader = choice("data", cfg.name)
    loader.refuse_format(data_format(splits), splits.name)
    loader.refuse_unsupported(device_type=runtime.device.type)
    if is_stream(splits.train) or is_stream(splits.val):
        loader.refuse_stream(splits.name)
    if not train and splits.val is None:
        return None
    args = (cfg, splits, runtime, batch_size, seed, train, channels_last)
    if subset is None:
        return loader.build(*args)
    if train or is_stream(splits.val):
        raise ConfigError(f"train.target_eval_samples reads a subset of the held-out split by index, but "
                          f"dataset={splits.name}'s held-out split is a stream: drop train.target_eval_samples")
    loader.refuse_held_out_subset()
    return loader.build(*args, subset=subset)
