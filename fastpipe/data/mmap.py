"""data=mmap: whole batches gathered out of a memory map by reader threads, no per-sample Python.

Where the batches come from:
- image datasets (``ImageFiles``): an images pack (decoded once, uint8), read with one ``np.take``
  per batch into pinned memory; random-resized-crop + flip or a resize and the normalisation then
  run on the training device (augment.py);
- datasets that are memory-mapped themselves and can read a batch at once (``read_batch``, e.g.
  ``dataset=tokens``): straight from their own map;
- any other dataset of fixed-shape samples: a records pack (records.py), packed once.
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from itertools import islice
from pathlib import Path

import numpy as np
import torch

from fastpipe.config import MmapLoaderConfig
from fastpipe.data.augment import DeviceTransform, ImagePackPrep
from fastpipe.data.cache import ensure_cached_pack, stored_shape
from fastpipe.data.device import DeviceLoader, MovePrep
from fastpipe.data.packfile import TRAIN, VAL, PackReader
from fastpipe.data.records import RecordPack
from fastpipe.data.splits import DataSplits
from fastpipe.data.streams import is_stream
from fastpipe.errors import ConfigError, DataError, no_full_batch
from fastpipe.runtime import Runtime


class ImagePack:
    """An images pack as a batch source: (uint8 N x C x H x W, int64 labels)."""

    def __init__(self, reader: PackReader) -> None:
        self.reader, self.path = reader, reader.path

    def read_batch(self, idx: np.ndarray, pin: bool = False):
        """One gather out of the map into (pinned) memory; numpy drops the GIL."""
        images = torch.empty((len(idx),) + self.reader.shape, dtype=torch.uint8, pin_memory=pin)
        np.take(self.reader.images, idx, axis=0, out=images.numpy(), mode="clip")  # clip: unbuffered
        labels = torch.from_numpy(self.reader.labels[idx])
        return images.permute(0, 3, 1, 2), labels.pin_memory() if pin else labels


class DatasetSource:
    """A dataset that reads whole batches itself (``read_batch``), e.g. a token memmap."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def read_batch(self, idx: np.ndarray, pin: bool = False):
        batch = self.dataset.read_batch(idx)
        return tuple(t.pin_memory() for t in batch) if pin else batch


class PackBatches:
    """Host side: this rank's batches out of ``source``, read ahead by threads.

    ``indices`` are the split's positions in the source. Training epochs are a permutation of them
    drawn from (seed, epoch), or the dataset's own ``epoch_indices``; ranks take every
    ``world_size``-th sample of it (a resume leaves out the epoch's first samples over all ranks).
    Held-out: a contiguous block per rank, every sample evaluated exactly once.
    """

    def __init__(self, source, indices: np.ndarray, batch_size: int, dist, seed: int, train: bool,
                 drop_last: bool, threads: int, prefetch: int, pin: bool, device: torch.device,
                 epochs=None) -> None:
        self.source, self.indices, self.batch_size, self.dist, self.device = source, indices, batch_size, dist, device
        self.seed, self.train, self.drop_last, self.epochs = seed, train, drop_last, epochs
        self.threads, self.prefetch, self.pin = threads, prefetch, pin
        self.epoch, self._skip = 0, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def skip_next(self, samples: int) -> None:
        """Resume: the next epoch starts ``samples`` per rank in (whole batches), without reading them."""
        self._skip = (samples // self.batch_size) * self.batch_size * self.dist.world_size

    def _epoch_size(self) -> int:
        return int(getattr(self.epochs, "epoch_length", None) or len(self.indices))

    def _per_rank(self) -> int:
        if self.train:  # equal shares: every DDP rank must run the same number of steps
            return self._epoch_size() // self.dist.world_size
        return len(np.array_split(self.indices, self.dist.world_size)[self.dist.rank])

    def __len__(self) -> int:
        n = self._per_rank()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def epoch_batches(self) -> list:
        """This rank's index batches for the current epoch (each sorted: ascending reads)."""
        if self.train:  # one order per (seed, epoch), the same on every rank; ranks take slices
            if self.epochs is not None and hasattr(self.epochs, "epoch_indices"):
                order = self.indices[np.asarray(self.epochs.epoch_indices(self.seed, self.epoch))]
            else:
                rng = np.random.default_rng([self.seed % 2**32, self.epoch])
                order = self.indices[rng.permutation(len(self.indices))]
            world = self.dist.world_size
            mine = order[self._skip:self._per_rank() * world][self.dist.rank::world]
        else:
            mine = np.array_split(self.indices, self.dist.world_size)[self.dist.rank]
        bs = self.batch_size
        count = len(mine) // bs if self.drop_last else -(-len(mine) // bs)
        return [np.sort(mine[i * bs:(i + 1) * bs]) for i in range(count)]

    def __iter__(self):
        batches = iter(self.epoch_batches())
        self._skip = 0
        # Pinning in a fresh thread would touch the current device, GPU 0, unless told this rank's GPU.
        bind = dict(initializer=torch.cuda.set_device, initargs=(self.device,)) \
            if self.pin and self.device.type == "cuda" else {}
        pool = ThreadPoolExecutor(self.threads, thread_name_prefix="fastpipe-mmap", **bind)
        read = lambda idx: self.source.read_batch(idx, self.pin)  # noqa: E731
        pending = deque(pool.submit(read, idx) for idx in islice(batches, self.prefetch))
        try:
            while pending:
                batch = pending.popleft().result()
                for idx in islice(batches, 1):  # keep `prefetch` reads in flight
                    pending.append(pool.submit(read, idx))
                yield batch
        finally:  # also when training stops mid-epoch (max_steps)
            for future in pending:
                future.cancel()
            pool.shutdown(wait=False)


class MmapLoader(DeviceLoader):
    """The data=mmap loader: ``PackBatches`` on the host, the batch's preparation on the device."""

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        if hasattr(self.prepare, "set_epoch"):
            self.prepare.set_epoch(epoch)


@lru_cache(maxsize=8)
def _open(path: str, verify: bool, threads: int, stamp: tuple) -> PackReader:
    reader = PackReader(path)
    if verify:
        reader.verify(threads=threads)
    return reader


def open_pack(path, verify: bool, threads: int = 1) -> PackReader:
    """Open (and verify, over ``threads``) a pack once per process: the train and eval loaders share it."""
    try:
        st = Path(path).stat()
    except FileNotFoundError:
        return PackReader(path)  # raises its DataError naming the file
    return _open(str(path), verify, threads, (st.st_ino, st.st_size, st.st_mtime_ns))


def _check_images(reader: PackReader, splits: DataSplits) -> None:
    counts = (len(reader.indices(TRAIN)), len(reader.indices(VAL)))
    train, val = splits.train, splits.val
    if not reader.is_images or reader.classes != train.classes or counts != (len(train), len(val)):
        what = (f"{counts[0]} train / {counts[1]} val images of classes {reader.classes[:8]}" if reader.is_images
                else "records, not images")
        raise DataError(f"pack {reader.path} holds {what}, but dataset={splits.name} has {len(train)} / "
                        f"{len(val)} of {train.classes[:8]}; give the dataset settings it was packed from, "
                        "or set data.path=null to pack this dataset")
    if min(reader.height, reader.width) < train.image_size:
        raise ConfigError(f"pack {reader.path} stores {reader.height}x{reader.width} images, smaller than "
                          f"dataset.image_size={train.image_size}; repack at >= {train.image_size} "
                          "(`python -m fastpipe.pack --size`, or data.stored_size for the cache)")


def resolve_pack(cfg: MmapLoaderConfig, splits: DataSplits, runtime: Runtime):
    """(PackReader, how it was found) for data.path, or the dataset's cached pack (packed if absent)."""
    threads = cfg.packing_threads(runtime.cores_per_process)
    if cfg.path:
        reader, how = open_pack(Path(cfg.path).expanduser(), cfg.verify, threads), "given"
        if cfg.stored_size is not None and stored_shape(cfg.stored_size, 0, False) != reader.shape[:2]:
            raise ConfigError(f"data.stored_size={cfg.stored_size} but the pack {reader.path} stores "
                              f"{reader.height}x{reader.width}; drop data.stored_size (it sizes the cache)")
    else:
        shape = (stored_shape(cfg.stored_size, splits.train.image_size, splits.train.augment)
                 if splits.is_images else (0, 0))
        path, how = ensure_cached_pack(splits, runtime.cache_root, shape, threads, progress=runtime.dist.is_main)
        reader, how = open_pack(path, cfg.verify, threads), f"cache, {how}"
    if splits.is_images:
        _check_images(reader, splits)
    elif (reader.is_images or reader.meta.get("identity") not in (None, splits.identity)
          or (len(reader.indices(TRAIN)), len(reader.indices(VAL))) != (len(splits.train), len(splits.val))):
        raise DataError(f"pack {reader.path} does not hold dataset={splits.name}'s samples (it was packed from "
                        f"{reader.meta.get('dataset', 'another dataset')} with other settings); repack it, or set "
                        "data.path=null to pack this dataset into the cache")
    return reader, how


def build_mmap_loader(cfg: MmapLoaderConfig, splits: DataSplits, runtime: Runtime, batch_size: int, seed: int,
                      train: bool, channels_last: bool, limit=None) -> MmapLoader:
    """The training (shuffled per epoch, augmented per dataset.augment) or held-out loader (its first
    ``limit`` samples)."""
    dist, device = runtime.dist, runtime.device
    pin = cfg.pin(device.type)
    if pin and not torch.cuda.is_available():
        raise ConfigError("data.pin_memory=true needs CUDA (pinned memory speeds host-to-GPU copies); "
                          "use data.pin_memory=auto")
    dataset = splits.train if train else splits.val
    if is_stream(splits.train) or is_stream(splits.val):
        raise ConfigError(f"data=mmap reads samples by index, but dataset={splits.name} is a stream (an "
                          "IterableDataset); use data=default")
    if hasattr(dataset, "read_batch") and not cfg.path:  # memory-mapped itself: no pack
        source, indices, how = DatasetSource(dataset), np.arange(len(dataset)), "the dataset's own memory map"
        prepare, geometry = MovePrep(device), "as read"
    else:
        reader, found = resolve_pack(cfg, splits, runtime)
        indices, how = reader.indices(TRAIN if train else VAL), f"pack={reader.path} ({found})"
        if splits.is_images:
            source, augment = ImagePack(reader), splits.train.augment and train
            size = splits.train.image_size
            prepare = ImagePackPrep(DeviceTransform(device, size, augment, channels_last, seed + dist.rank))
            geometry = ("random-resized-crop+flip" if augment else
                        "as stored" if reader.shape[:2] == (size, size) else "resize") + ", normalise"
            how += f"  stored={reader.height}x{reader.width}"
        else:
            source, prepare, geometry = RecordPack(reader), MovePrep(device), "as stored"
    if limit is not None:
        indices = indices[:limit]
    threads = cfg.reader_threads(runtime.cores_per_process)
    host = PackBatches(source, indices, batch_size, dist, seed, train, cfg.drop_last and train, threads,
                       cfg.prefetch, pin, device, epochs=dataset if train else None)
    if train and len(host) == 0:
        raise no_full_batch(host._epoch_size(), batch_size, dist.world_size)
    description = (f"mmap  {how}  threads={threads}  prefetch={cfg.prefetch}  pin_memory={pin}  "
                   f"drop_last={host.drop_last}  verify={cfg.verify}  on {device.type}: {geometry}")
    return MmapLoader(host, prepare, host, description)

