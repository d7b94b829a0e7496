"""The ``data`` group: one module per loader; ``build_loader`` picks by ``data.name``."""
from __future__ import annotations

from fastpipe.config import LoaderConfig
from fastpipe.errors import ConfigError
from fastpipe.runtime import Runtime


def build_loader(cfg: LoaderConfig, spec, runtime: Runtime, batch_size: int, seed: int, train: bool,
                 channels_last: bool):
    """An iterable of (images, labels) on the training device with ``len()``, ``set_epoch()`` and
    ``describe()``: the loader ``cfg`` names over ``spec`` (a DatasetSpec)."""
    dist, device = runtime.dist, runtime.device
    if spec.is_synthetic:
        if cfg.name != "default":
            raise ConfigError(f"dataset=synthetic is generated on the device and has no files for "
                              f"data={cfg.name}; use data=default, or a real dataset (dataset=shapes)")
        from fastpipe.data.synthetic import SyntheticLoader
        return SyntheticLoader(spec, device, batch_size, seed + dist.rank, channels_last) if train else None
    if cfg.name == "default":
        from fastpipe.data.default import build_default_loader
        return build_default_loader(cfg, spec, runtime, batch_size, seed, train, channels_last)
    if cfg.name == "dali":
        from fastpipe.data.dali import build_dali_loader
        return build_dali_loader(cfg, spec, runtime, batch_size, seed, train, channels_last)
    if cfg.name == "mmap":
        from fastpipe.data.mmap import build_mmap_loader
        return build_mmap_loader(cfg, spec, runtime, batch_size, seed, train, channels_last)
    raise ConfigError(f"data={cfg.name} is not a known loader")

