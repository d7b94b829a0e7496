"""data=default: torch.utils.data.DataLoader over any map-style dataset (PIL decoding in workers for images)."""
from __future__ import annotations

import multiprocessing
import statistics
import time
from typing import Optional

import torch
from torch.utils.data import DataLoader, Subset

from fastpipe.config import DefaultLoaderConfig
from fastpipe.data.batches import NamedCollate
from fastpipe.data.device import DeviceLoader, ImagePrep, MovePrep, Normalizer
from fastpipe.data.sampler import EpochSampler
from fastpipe.data.splits import DataSplits
from fastpipe.data.streams import Shard, epoch_length, is_stream
from fastpipe.errors import no_full_batch
from fastpipe.runtime import Runtime


CHEAP_SAMPLE_S = 50e-6  # num_workers=auto: a sample read faster than this takes no worker processes
TIMED_SAMPLES = 256


def sample_read_s(dataset) -> Optional[float]:
    """Seconds this process takes to read one of ``dataset``'s samples: the median over its first
    ``TIMED_SAMPLES`` after a first read (which may open files or page in), so that a moment this process
    was not running (a busy machine) does not decide it; timing stops once the samples have taken 4 times
    ``CHEAP_SAMPLE_S`` each (and 8 are timed), so a slow dataset costs this check at most ~50 ms. None for
    fewer than 2 samples."""
    n = min(len(dataset), TIMED_SAMPLES)
    if n < 2:
        return None
    dataset[0]
    budget, times, start = 4 * CHEAP_SAMPLE_S * (n - 1), [], time.perf_counter()
    for i in range(1, n):
        began = time.perf_counter()
        dataset[i]
        times.append(time.perf_counter() - began)
        if len(times) >= 8 and time.perf_counter() - start >= budget:
            break
    return statistics.median(times)


def build_default_loader(cfg: DefaultLoaderConfig, splits: DataSplits, runtime: Runtime, batch_size: int,
                         seed: int, train: bool, channels_last: bool, subset=None) -> DeviceLoader:
    """The training (shuffled by seed and epoch) or held-out loader of ``splits`` (only the positions
    ``subset``, when given)."""
    dist, device = runtime.dist, runtime.device
    if splits.is_synthetic:  # already on the device: a few fixed batches, no DataLoader
        from fastpipe.data.synthetic import SyntheticLoader
        return SyntheticLoader(splits.train, device, batch_size, seed + dist.rank, channels_last)
    dataset = splits.train if train else splits.val
    if subset is not None:
        dataset = Subset(dataset, [int(i) for i in subset])
    read_s = (sample_read_s(dataset) if cfg.num_workers == "auto" and not is_stream(dataset) and not splits.is_images
              else None)
    cheap = read_s is not None and read_s < CHEAP_SAMPLE_S
    sampler, workers = None, cfg.workers(runtime.cores_per_process, cheap_samples=cheap)
    persistent = cfg.persistent_workers
    if is_stream(dataset):  # sharded over ranks and workers; no random access, no sampler
        quota = None
        if train:
            per_worker = epoch_length(dataset, splits.name) // dist.world_size // max(1, workers)
            quota = per_worker // batch_size * batch_size if cfg.drop_last else per_worker
        dataset = Shard(dataset, dist.rank, dist.world_size, workers, quota, splits.name)
        persistent = persistent and not hasattr(dataset.stream, "set_epoch")  # fresh workers see the new epoch
        sampler = dataset if train else None  # set_epoch reaches the stream through it
    elif train:  # order = f(seed, epoch) on every rank count, and resumable part-way (checkpoints)
        sampler = EpochSampler(dataset, dist.world_size, dist.rank, seed=seed, drop_last=cfg.drop_last)
    elif dist.world_size > 1:
        dataset = Subset(dataset, range(dist.rank, len(dataset), dist.world_size))  # each sample once
    pin = cfg.pin(device.type)
    collate = NamedCollate(splits.collate_fn, splits.name, "training" if train else "held-out")
    # The training process is itself spawned, so its default start method is spawn, which re-imports
    # torch in every worker (seconds per epoch start). Workers never touch CUDA: fork is safe.
    context = "fork" if workers > 0 and "fork" in multiprocessing.get_all_start_methods() else None
    loader = DataLoader(
        dataset, batch_size=batch_size, sampler=None if isinstance(dataset, Shard) else sampler, num_workers=workers,
        pin_memory=pin, drop_last=cfg.drop_last and train, collate_fn=collate,
        generator=torch.Generator().manual_seed(seed), persistent_workers=persistent and workers > 0,
        prefetch_factor=cfg.prefetch_factor if workers > 0 else None, multiprocessing_context=context)
    if train and len(loader) == 0:
        raise no_full_batch(len(sampler) * dist.world_size, batch_size, dist.world_size)
    if isinstance(dataset, Shard) and not train:
        sampler = None
    prepare = ImagePrep(Normalizer(device, channels_last)) if splits.is_images else MovePrep(device)
    why = (f" (auto: {read_s * 1e6:.0f} us a sample, read here)" if read_s is not None else
           " (auto: image files to decode)" if cfg.num_workers == "auto" and splits.is_images else "")
    description = (f"default  DataLoader  num_workers={workers}{why}  pin_memory={pin}  "
                   f"persistent_workers={loader.persistent_workers}  prefetch_factor={cfg.prefetch_factor}  "
                   f"drop_last={loader.drop_last}")
    return DeviceLoader(loader, prepare, sampler, description)
