"""data=mmap: whole batches gathered out of a memory map by reader threads, no per-sample Python.

Where the batches come from:
- image datasets (``ImageFiles``): an images pack (one file or shards; raw uint8 read with one
  ``np.take`` per batch into pinned memory, or JPEG decoded per batch on the GPU, in CPU threads
  or worker processes (pack/workers.py), or by one DALI pipeline the reader threads feed,
  pack/dali_decode.py); random-resized-crop
  + flip or a resize and the normalisation then run on the training device (augment.py);
- datasets that are memory-mapped themselves and can read a batch at once (``read_batch``, e.g.
  ``dataset=tokens``): straight from their own map;
- any other dataset of fixed-shape samples: a records pack (pack/records.py), packed once.
"""
from __future__ import annotations

import warnings
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from itertools import islice

import numpy as np
import torch

from fastpipe.config import MmapLoaderConfig
from fastpipe.data.augment import DeviceTransform, ImagePackPrep
from fastpipe.data.device import DeviceLoader, MovePrep
from fastpipe.data.pack.dali_decode import dali_decoded, describe_dali
from fastpipe.data.pack.format import TRAIN, VAL
from fastpipe.data.pack.jpeg import StreamSafe
from fastpipe.data.pack.records import RecordPack
from fastpipe.data.pack.resolve import jpeg_decoder, open_own_shards, read_plan, resolve_pack
from fastpipe.data.pack.source import PackFiles, PackImages
from fastpipe.data.pack.workers import DecodingWorkers
from fastpipe.data.splits import DataSplits
from fastpipe.errors import ConfigError, FastpipeWarning, no_full_batch
from fastpipe.measure.setup import setup_part
from fastpipe.runtime import Runtime


def reader_gpu(device: torch.device) -> torch.device:
    """The GPU a reader thread binds to: ``device`` with an index (torch.cuda.set_device refuses a bare
    ``cuda``, which means the current GPU)."""
    return device if device.index is not None else torch.device("cuda", torch.cuda.current_device())


class DatasetSource:
    """A dataset that reads whole batches itself (``read_batch``), e.g. a token memmap."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def read_batch(self, idx: np.ndarray, pin: bool = False):
        batch = self.dataset.read_batch(idx)
        return tuple(t.pin_memory() for t in batch) if pin else batch


class PackBatches:
    """Host side: this rank's batches out of ``source``, read ahead by threads (or by the source's own
    processes, a source with ``iterate``: data.decode_workers).

    ``indices`` are the split's positions in the source. Training epochs are a permutation of them
    drawn from (seed, epoch), or the dataset's own ``epoch_indices``; ranks take every
    ``world_size``-th sample of it (a resume leaves out the epoch's first samples over all ranks).
    Held-out: a contiguous block per rank, every sample evaluated exactly once. A sharded pack's
    training epochs come from ``plan`` (a LanePlan: each rank reads only its own shards).
    """

    def __init__(self, source, indices: np.ndarray, batch_size: int, dist, seed: int, train: bool,
                 drop_last: bool, threads: int, prefetch: int, pin: bool, device: torch.device,
                 epochs=None, plan=None) -> None:
        self.source, self.indices, self.batch_size, self.dist, self.device = source, indices, batch_size, dist, device
        self.seed, self.train, self.drop_last, self.epochs, self.plan = seed, train, drop_last, epochs, plan
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
        if self.plan is not None:
            return self.plan.per_rank()
        if self.train:  # equal shares: every DDP rank must run the same number of steps
            return self._epoch_size() // self.dist.world_size
        return len(np.array_split(self.indices, self.dist.world_size)[self.dist.rank])

    def __len__(self) -> int:
        n = self._per_rank()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def epoch_batches(self) -> list:
        """This rank's index batches for the current epoch (each sorted: ascending reads)."""
        if self.plan is not None:
            return [self.indices[b] for b in self.plan.epoch(self.epoch, self._skip // (self.batch_size * self.dist.world_size))]
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
        batches = self.epoch_batches()
        self._skip = 0
        if hasattr(self.source, "iterate"):  # a source reading in processes of its own
            yield from self.source.iterate(batches)
            return
        batches = iter(batches)
        # Pinning in a fresh thread would touch the current device, GPU 0, unless told this rank's GPU.
        bind = dict(initializer=torch.cuda.set_device, initargs=(reader_gpu(self.device),)) \
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


def _image_stages(cfg: MmapLoaderConfig, packs, splits: DataSplits, runtime: Runtime, pin: bool, train: bool,
                  channels_last: bool, seed: int, batch_size: int):
    """An images pack's (source, device preparation, its geometry, words for the description, the decoding
    stage around the host's reads or None): JPEGs decoded by data.decoder's choice, augmented per dataset.augment."""
    device, size = runtime.device, splits.train.image_size
    augment = splits.train.augment and train
    prepare = ImagePackPrep(DeviceTransform(device, size, augment, channels_last, seed + runtime.dist.rank))
    geometry = ("random-resized-crop+flip" if augment else
                "as stored" if packs.stored == (size, size) else "resize") + ", normalise"
    words = f"  stored={packs.stored[0]}x{packs.stored[1]}  codec={packs.codec}"
    cores = runtime.cores_per_process
    if packs.codec == "jpeg" and cfg.decoder_for(device.type, cores) == "dali":  # one DALI pipeline decodes the files
        gpu = reader_gpu(device) if device.type == "cuda" else None
        decode = partial(dali_decoded, cfg=cfg, runtime=runtime, stored=packs.stored, path=packs.path, gpu=gpu)
        return PackFiles(packs), prepare, geometry, f"{words}  {describe_dali(cfg, runtime)}", decode
    workers = cfg.decoding_workers(device.type, cores) if cfg.decoder_for(device.type, cores) == "cpu" else 0
    # None for a raw pack: data.decoder changes nothing. With workers, this one only tries the first image.
    decoder = jpeg_decoder(cfg, packs, runtime, pin, 1 if workers else cfg.decoding_threads(cores))
    if decoder is not None and workers:
        _warn_unused_threads(cfg, workers)
        source = DecodingWorkers(packs, workers, batch_size, cfg.prefetch, pin, cfg.decode_affinity, runtime.dist)
        return source, prepare, geometry, f"{words}  {source.describe()}", None
    if decoder is not None:
        prepare = StreamSafe(prepare) if decoder.where == "gpu" else prepare
        words += f"  decoder={decoder.where}" + (f" ({decoder.threads} threads)" if decoder.where == "cpu" else "")
    return PackImages(packs, decoder), prepare, geometry, words, None


def _warn_unused_threads(cfg: MmapLoaderConfig, workers: int) -> None:
    """``data.decode_threads`` set for the CPU decoder while worker processes decode: it would do nothing unsaid."""
    if cfg.decode_threads != "auto":
        warnings.warn(f"data.decode_threads={cfg.decode_threads} does nothing here: the JPEGs are decoded in worker "
                      f"processes (data.decode_workers={workers}); set data.decode_workers=0 to decode in threads",
                      FastpipeWarning)


def _pick(indices: np.ndarray, subset) -> np.ndarray:
    """The split's pack indices, or those at the positions ``subset`` (a held-out subset)."""
    return indices if subset is None else indices[np.asarray(subset, dtype=np.int64)]


class MmapLoader(DeviceLoader):
    """The data=mmap loader: ``PackBatches`` on the host, the batch's preparation on the device."""

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        if hasattr(self.prepare, "set_epoch"):
            self.prepare.set_epoch(epoch)


def build_mmap_loader(cfg: MmapLoaderConfig, splits: DataSplits, runtime: Runtime, batch_size: int, seed: int,
                      train: bool, channels_last: bool, subset=None) -> MmapLoader:
    """The training (shuffled per epoch, augmented per dataset.augment) or held-out loader (only the
    positions ``subset``, when given)."""
    dist, device = runtime.dist, runtime.device
    pin = cfg.pin(device.type)
    if pin and not torch.cuda.is_available():
        raise ConfigError("data.pin_memory=true needs CUDA (pinned memory speeds host-to-GPU copies); "
                          "use data.pin_memory=auto")
    dataset = splits.train if train else splits.val
    decode = None  # a stage between the host's reads and the device's preparation (data.decoder=dali)
    if hasattr(dataset, "read_batch") and not cfg.path:  # memory-mapped itself: no pack
        source, indices, how = DatasetSource(dataset), _pick(np.arange(len(dataset)), subset), "the dataset's own memory map"
        prepare, geometry, plan = MovePrep(device), "as read", None
    else:
        with setup_part("pack_open"):  # found or packed, opened and verified (shared by the loaders: once)
            packs, found, verified = resolve_pack(cfg, splits, runtime)
        indices, how = _pick(packs.indices(TRAIN if train else VAL), subset), f"pack={packs.path} ({found})  {verified}"
        if splits.is_images:
            source, prepare, geometry, words, decode = _image_stages(cfg, packs, splits, runtime, pin, train,
                                                                     channels_last, seed, batch_size)
            how += words
        else:
            source, prepare, geometry = RecordPack(packs.reader(0)), MovePrep(device), "as stored"
        plan = read_plan(cfg, packs, indices, dist, batch_size, seed, cfg.drop_last) if train else None
        with setup_part("pack_open"):  # a sharded pack's shards this rank reads, verified
            how += open_own_shards(packs, indices, plan, dist)
    threads = cfg.reader_threads(runtime.cores_per_process)
    host = PackBatches(source, indices, batch_size, dist, seed, train, cfg.drop_last and train, threads,
                       cfg.prefetch, pin, device, epochs=dataset if train else None, plan=plan)
    if train and len(host) == 0:
        raise no_full_batch(host._epoch_size(), batch_size, dist.world_size)
    readers = "" if hasattr(source, "iterate") else f"  threads={threads}"  # worker processes read for themselves
    description = (f"mmap  {how}{readers}  prefetch={cfg.prefetch}  pin_memory={pin}  "
                   f"drop_last={host.drop_last}  verify={cfg.verify}  on {device.type}: {geometry}")
    return MmapLoader(host if decode is None else decode(host), prepare, host, description)

