"""Opening data=mmap's pack: data.path or the cache, the checks against the dataset, the JPEG
decoder, the read plan of a sharded pack and the shards this rank opens."""
from __future__ import annotations

import dataclasses
import os
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from fastpipe.config import MmapLoaderConfig
from fastpipe.data.cachedir import passed_at, stamp, version_key
from fastpipe.data.pack.cache import ensure_cached_pack, stored_shape
from fastpipe.data.pack.format import TRAIN, VAL
from fastpipe.data.pack.jpeg import Decoder, gather
from fastpipe.data.pack.lanes import LanePlan
from fastpipe.data.pack.shards import PackSet, index_of, pack_version
from fastpipe.data.splits import DataSplits
from fastpipe.errors import ConfigError, DataError, EnvironmentProblem, FastpipeWarning
from fastpipe.runtime import Runtime

BUFFER_WHEN_LARGE = 16384  # data.shuffle_buffer=auto for shards larger than half the RAM


@lru_cache(maxsize=8)
def _open(path: str, verify: bool, threads: int, version: tuple, cache_root: Optional[Path]) -> Tuple[PackSet, str]:
    if not verify or index_of(Path(path)) is not None:  # a sharded pack verifies each shard as it opens it
        return PackSet(path, verify, threads), "verified as opened" if verify else "not verified"
    key = version_key("pack", [str(Path(path).resolve()), *map(str, version)])
    earlier = passed_at(cache_root, key)  # once per version of the file (data/cachedir.py)
    packs = PackSet(path, earlier is None, threads)
    if earlier is None:
        stamp(cache_root, key)
    return packs, f"verified {'now' if earlier is None else 'at ' + earlier}"


def open_pack(path, verify: bool, threads: int = 1, cache_root: Optional[Path] = None) -> Tuple[PackSet, str]:
    """Open a pack once per process (the train and eval loaders share it) and, with ``verify``, check
    every chunk over ``threads``, once per version of the file when ``cache_root`` keeps the stamp;
    (the pack, how it was verified). A sharded pack's shards are opened, and verified, when first needed."""
    path = Path(path)
    try:
        version = pack_version(path)
    except FileNotFoundError:
        return PackSet(path), ""  # raises its DataError naming the file
    return _open(str(path), verify, threads, version, cache_root)


def _check_images(packs: PackSet, splits: DataSplits) -> None:
    counts = (len(packs.indices(TRAIN)), len(packs.indices(VAL)))
    train, val = splits.train, splits.val
    if not packs.is_images or packs.classes != train.classes or counts != (len(train), len(val)):
        what = (f"{counts[0]} train / {counts[1]} val images of classes {packs.classes[:8]}" if packs.is_images
                else "records, not images")
        raise DataError(f"pack {packs.path} holds {what}, but dataset={splits.name} has {len(train)} / "
                        f"{len(val)} of {train.classes[:8]}; give the dataset settings it was packed from, "
                        "or set data.path=null to pack this dataset")
    if min(packs.stored) < train.image_size:
        raise ConfigError(f"pack {packs.path} stores {packs.stored[0]}x{packs.stored[1]} images, smaller than "
                          f"dataset.image_size={train.image_size}; repack at >= {train.image_size} "
                          "(`python -m fastpipe.pack --size`, or data.stored_size for the cache)")


def resolve_pack(cfg: MmapLoaderConfig, splits: DataSplits, runtime: Runtime):
    """(PackSet, how it was found, how it was verified) for data.path, or the dataset's cached pack
    (packed if absent)."""
    threads = cfg.packing_threads(runtime.cores_per_process)
    if cfg.path:
        packs, verified = open_pack(Path(cfg.path).expanduser(), cfg.verify, threads, runtime.cache_root)
        how = "given"
        if cfg.stored_size is not None and stored_shape(cfg.stored_size, 0, False) != packs.stored:
            raise ConfigError(f"data.stored_size={cfg.stored_size} but the pack {packs.path} stores "
                              f"{packs.stored[0]}x{packs.stored[1]}; drop data.stored_size (it sizes the cache)")
        if cfg.codec is not None and cfg.codec != packs.codec:
            raise ConfigError(f"data.codec={cfg.codec} but the pack {packs.path} stores {packs.codec} images; drop "
                              "data.codec (it sets how the cache packs)")
    else:
        shape = (stored_shape(cfg.stored_size, splits.train.image_size, splits.train.augment)
                 if splits.is_images else (0, 0))
        if splits.is_images and min(shape) < splits.train.image_size:  # refused before packing, not after
            raise ConfigError(f"data.stored_size={cfg.stored_size} is smaller than dataset.image_size="
                              f"{splits.train.image_size}: the cache would store {shape[0]}x{shape[1]} images; give "
                              f"data.stored_size >= {splits.train.image_size}, or null (auto)")
        path, how = ensure_cached_pack(splits, runtime.cache_root, shape, threads, progress=runtime.dist.is_main,
                                       codec=cfg.codec or "raw", quality=cfg.quality)
        packs, verified = open_pack(path, cfg.verify, threads, runtime.cache_root)
        how = f"cache, {how}"
    _warn_unused_quality(cfg, splits)
    if splits.is_images:
        _check_images(packs, splits)
    elif (packs.is_images or packs.meta.get("identity") not in (None, splits.identity)
          or (len(packs.indices(TRAIN)), len(packs.indices(VAL))) != (len(splits.train), len(splits.val))):
        raise DataError(f"pack {packs.path} does not hold dataset={splits.name}'s samples (it was packed from "
                        f"{packs.meta.get('dataset', 'another dataset')} with other settings); repack it, or set "
                        "data.path=null to pack this dataset into the cache")
    return packs, how, verified


def _warn_unused_quality(cfg: MmapLoaderConfig, splits: DataSplits) -> None:
    """``data.quality`` sets only the JPEG quality the cache packs images at (``data.codec=jpeg``): set for
    any other pack, it would be ignored without a word."""
    default = next(f.default for f in dataclasses.fields(MmapLoaderConfig) if f.name == "quality")
    if cfg.quality == default:
        return
    reads = ("the given pack (data.path), read as it was written" if cfg.path else
             "a records pack (the dataset's samples are not images)" if not splits.is_images else
             f"a raw pack (data.codec={cfg.codec or 'null'})" if (cfg.codec or "raw") != "jpeg" else None)
    if reads:
        warnings.warn(f"data.quality={cfg.quality} does nothing here: it is the JPEG quality of the cache's data.codec="
                      f"jpeg pack, and this run reads {reads}; drop data.quality, or add data.codec=jpeg", FastpipeWarning)


def jpeg_decoder(cfg: MmapLoaderConfig, packs: PackSet, runtime: Runtime, pin: bool,
                 threads: int) -> Optional[Decoder]:
    """None for raw packs; for JPEG the decoder data.decoder picks (``threads``: the CPU decoder's), tried
    once on the pack's first image."""
    if packs.codec != "jpeg":
        return None
    where = cfg.decoder_for(runtime.device.type, runtime.cores_per_process)
    decoder = Decoder(where, runtime.device, packs.stored, threads, pin)
    first = gather(packs.any_reader(), np.arange(1))
    try:
        decoder(first)
    except RuntimeError as exc:  # a torchvision built without nvJPEG, or a damaged pack
        try:
            Decoder("cpu", runtime.device, packs.stored, 1, False)(first)
        except RuntimeError:
            raise DataError(f"pack {packs.path}: its first JPEG does not decode ({str(exc).splitlines()[0][:200]}); "
                            "check the pack with data.verify=true, or repack it") from exc
        raise EnvironmentProblem(f"data.decoder={where} cannot decode the pack's JPEGs on {runtime.device} "
                                 f"({str(exc).splitlines()[0]}); use data.decoder=cpu") from exc
    return decoder


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def read_plan(cfg: MmapLoaderConfig, packs: PackSet, indices: np.ndarray, dist, batch_size: int, seed: int,
              drop_last: bool) -> Optional[LanePlan]:
    """The lane plan of a sharded pack's training split (or of any pack read through a shuffle
    buffer); None: the one-file default, a permutation of all samples per epoch, ranks interleaved."""
    buffer = cfg.shuffle_buffer
    if buffer == "auto":
        if not packs.sharded:
            return None
        share = sum(s["bytes"] for s in packs.shards if s["train"]) / dist.world_size
        buffer = BUFFER_WHEN_LARGE if share > _memory_bytes() / 2 else 0
    if not packs.sharded and buffer == 0:
        return None
    starts = np.unique(np.searchsorted(indices, packs.starts))  # each shard's start among the training samples
    starts = starts[starts < len(indices)]
    return LanePlan(len(indices), starts, dist.world_size, dist.rank, batch_size, seed, int(buffer), drop_last)


def open_own_shards(packs: PackSet, indices: np.ndarray, plan: Optional[LanePlan], dist) -> str:
    """Open (and with data.verify, check) now the shards this rank reads; a word for the description."""
    if not packs.sharded:
        return f"  lanes={plan.lanes}  shuffle_buffer={plan.shuffle_buffer}" if plan else ""
    if plan is not None:
        first, stop = plan.owned()
        mine = indices[first:stop]
    else:
        mine = np.array_split(indices, dist.world_size)[dist.rank]
    shards = np.unique(packs.shards_of(mine)) if len(mine) else np.array([], dtype=int)
    packs.open(shards)
    what = f"  shards={len(shards)} of {len(packs.shards)}"
    if plan is not None:
        what += f"  lanes={plan.lanes}  shuffle_buffer={plan.shuffle_buffer}"
    return what
