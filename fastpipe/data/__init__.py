"""The ``data`` group: one module per loader; ``build_loader`` picks by ``data.name``."""
from __future__ import annotations

from fastpipe.config import LoaderConfig
from fastpipe.data.streams import is_stream
from fastpipe.errors import ConfigError
from fastpipe.runtime import Runtime


def build_loader(cfg: LoaderConfig, splits, runtime: Runtime, batch_size: int, seed: int, train: bool,
                 channels_last: bool, limit=None):
    """An iterable of (inputs, targets) on the training device with ``len()``, ``set_epoch()`` and
    ``describe()``: the loader ``cfg`` names over ``splits`` (a DataSplits); None when there is no
    held-out split. ``limit`` (held-out only): the split's first ``limit`` samples in split order,
    shared out over the ranks as the whole split would be (``train.target_eval_samples``)."""
    if limit is not None:
        if train or is_stream(splits.val):
            raise ConfigError(f"train.target_eval_samples takes the first samples of a held-out split by index, but "
                              f"dataset={splits.name}'s held-out split is a stream: drop train.target_eval_samples")
        limit = min(int(limit), len(splits.val))
    dist, device = runtime.dist, runtime.device
    if splits.is_synthetic:
        if cfg.name != "default":
            raise ConfigError(f"data={cfg.name} cannot read dataset={splits.name}: it is generated on the device "
                              "and has no files; use data=default")
        from fastpipe.data.synthetic import SyntheticLoader
        return SyntheticLoader(splits.train, device, batch_size, seed + dist.rank, channels_last) if train else None
    if not train and splits.val is None:
        return None
    args = (cfg, splits, runtime, batch_size, seed, train, channels_last)
    if cfg.name == "default":
        from fastpipe.data.default import build_default_loader
        return build_default_loader(*args, limit=limit)
    if cfg.name == "dali":
        from fastpipe.data.dali import build_dali_loader
        return build_dali_loader(*args, limit=limit)
    if cfg.name == "mmap":
        from fastpipe.data.mmap import build_mmap_loader
        return build_mmap_loader(*args, limit=limit)
    raise ConfigError(f"data={cfg.name} is not a known loader")

