"""data=mmap: batches read straight out of a memory-mapped pack (see fastpipe/data/packfile.py).

Host side, reader threads copy each batch (its indices sorted, for locality) out of the map with
one ``np.take`` into pinned memory: no per-sample Python, no decoding. The stored N x H x W x C bytes
are already an N x C x H x W tensor in channels_last layout. Device side, random-resized-crop + flip
(``dataset.augment``, batched through ``torchvision.ops.roi_align``) or a resize, then the ImageNet
normalisation, run on the training device; on CUDA on a side stream while the current step runs.
"""
from __future__ import annotations

import math
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from itertools import islice
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torchvision.ops import roi_align

from fastpipe.config import MmapLoaderConfig
from fastpipe.data.cache import ensure_cached_pack, stored_shape
from fastpipe.data.device import DeviceLoader, Normalizer
from fastpipe.data.packfile import TRAIN, VAL, PackReader
from fastpipe.errors import ConfigError, DataError
from fastpipe.runtime import Runtime


def random_resized_boxes(n: int, height: int, width: int, generator: torch.Generator, device,
                         scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), attempts: int = 10) -> torch.Tensor:
    """torchvision's ``RandomResizedCrop.get_params`` for ``n`` images at once: (n, 4) x1, y1, x2, y2."""
    area = torch.empty(n, attempts, device=device).uniform_(*scale, generator=generator) * (height * width)
    log_ratio = torch.empty(n, attempts, device=device).uniform_(math.log(ratio[0]), math.log(ratio[1]),
                                                                  generator=generator)
    w, h = (area * log_ratio.exp()).sqrt().round(), (area / log_ratio.exp()).sqrt().round()
    fits = (w >= 1) & (w <= width) & (h >= 1) & (h <= height)
    tries = torch.arange(attempts, device=device).expand(n, attempts)
    first = torch.where(fits, tries, attempts - 1).amin(1, keepdim=True)  # torchvision takes the first fit
    w, h, ok = w.gather(1, first).squeeze(1), h.gather(1, first).squeeze(1), fits.any(1)
    # No attempt fits: torchvision's fall-back, the whole image clamped to the ratio range, centred.
    in_ratio = width / height
    fw, fh = ((width, round(width / ratio[0])) if in_ratio < ratio[0] else
              (round(height * ratio[1]), height) if in_ratio > ratio[1] else (width, height))
    w, h = torch.where(ok, w, float(fw)), torch.where(ok, h, float(fh))
    u = torch.rand(n, 2, device=device, generator=generator)
    x1 = torch.where(ok, (u[:, 0] * (width - w + 1)).floor(), ((width - w) / 2).floor())
    y1 = torch.where(ok, (u[:, 1] * (height - h + 1)).floor(), ((height - h) / 2).floor())
    return torch.stack([x1, y1, x1 + w, y1 + h], 1)


class DeviceTransform:
    """uint8 N x C x H x W on the host -> on ``device``: crop/flip or resize to ``size``, normalise."""

    def __init__(self, device: torch.device, size: int, augment: bool, channels_last: bool, seed: int) -> None:
        self.device, self.size, self.augment, self.seed = device, size, augment, seed
        self.norm = Normalizer(device, channels_last)
        self.generator = torch.Generator(device=device)
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        """Crops depend on (seed, epoch) only, so a resumed epoch gets the same ones."""
        self.generator.manual_seed((self.seed * 1_000_003 + epoch) % 2**63)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if not self.augment and tuple(images.shape[-2:]) == (self.size, self.size):
            return self.norm(images)  # stored at the training size: exactly data=default's path
        x = images.to(self.device, non_blocking=True).float()
        n, _, height, width = x.shape
        if self.augment:
            boxes = random_resized_boxes(n, height, width, self.generator, x.device)
            rois = torch.cat([torch.arange(n, device=x.device, dtype=x.dtype)[:, None], boxes], 1)
            # aligned=True: box edges are pixel edges; sampling_ratio=-1 averages ceil(crop/size)
            # samples per output pixel, so large crops are downscaled without aliasing.
            x = roi_align(x, rois, (self.size, self.size), spatial_scale=1.0, sampling_ratio=-1, aligned=True)
            flip = torch.rand(n, device=x.device, generator=self.generator) < 0.5
            x = torch.where(flip.view(n, 1, 1, 1), x.flip(3), x)
        else:
            x = F.interpolate(x, size=(self.size, self.size), mode="bilinear", antialias=True, align_corners=False)
        return x.sub_(self.norm.mean).div_(self.norm.std).contiguous(memory_format=self.norm.memory_format)


class PackBatches:
    """Host side: this rank's batches of (uint8 N x C x H x W, int64 labels), read ahead by threads."""

    def __init__(self, pack: PackReader, indices: np.ndarray, batch_size: int, dist, seed: int, train: bool,
                 drop_last: bool, threads: int, prefetch: int, pin: bool, device: torch.device) -> None:
        self.pack, self.indices, self.batch_size, self.dist, self.device = pack, indices, batch_size, dist, device
        self.seed, self.train, self.drop_last = seed, train, drop_last
        self.threads, self.prefetch, self.pin = threads, prefetch, pin
        self.epoch, self._skip = 0, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def skip_next(self, samples: int) -> None:
        """Resume: the next epoch starts ``samples`` in (whole batches), without reading them."""
        self._skip = samples // self.batch_size

    def _per_rank(self) -> int:
        if self.train:  # equal shares: every DDP rank must run the same number of steps
            return len(self.indices) // self.dist.world_size
        return len(np.array_split(self.indices, self.dist.world_size)[self.dist.rank])

    def __len__(self) -> int:
        n = self._per_rank()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def epoch_batches(self) -> list:
        """This rank's index batches for the current epoch (each sorted: ascending reads)."""
        if self.train:  # one permutation per (seed, epoch), the same on every rank; ranks take slices
            rng = np.random.default_rng([self.seed % 2**32, self.epoch])
            order, share = self.indices[rng.permutation(len(self.indices))], self._per_rank()
            mine = order[self.dist.rank * share:(self.dist.rank + 1) * share]
        else:  # a contiguous block per rank: every held-out image evaluated exactly once
            mine = np.array_split(self.indices, self.dist.world_size)[self.dist.rank]
        bs = self.batch_size
        return [np.sort(mine[i * bs:(i + 1) * bs]) for i in range(len(self))]

    def read(self, idx: np.ndarray):
        """One batch: a single gather out of the map into (pinned) memory; numpy drops the GIL."""
        images = torch.empty((len(idx),) + self.pack.shape, dtype=torch.uint8, pin_memory=self.pin)
        np.take(self.pack.images, idx, axis=0, out=images.numpy(), mode="clip")  # clip: unbuffered
        labels = torch.from_numpy(self.pack.labels[idx])
        return images.permute(0, 3, 1, 2), labels.pin_memory() if self.pin else labels

    def __iter__(self):
        batches = iter(self.epoch_batches()[self._skip:])
        self._skip = 0
        # Pinning in a fresh thread would touch the current device, GPU 0, unless told this rank's GPU.
        bind = dict(initializer=torch.cuda.set_device, initargs=(self.device,)) \
            if self.pin and self.device.type == "cuda" else {}
        pool = ThreadPoolExecutor(self.threads, thread_name_prefix="fastpipe-mmap", **bind)
        pending = deque(pool.submit(self.read, idx) for idx in islice(batches, self.prefetch))
        try:
            while pending:
                batch = pending.popleft().result()
                for idx in islice(batches, 1):  # keep `prefetch` reads in flight
                    pending.append(pool.submit(self.read, idx))
                yield batch
        finally:  # also when training stops mid-epoch (max_steps)
            for future in pending:
                future.cancel()
            pool.shutdown(wait=False)


class MmapLoader(DeviceLoader):
    """The data=mmap loader: ``PackBatches`` on the host, ``DeviceTransform`` on the device."""

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        self.normalize.set_epoch(epoch)


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


def resolve_pack(cfg: MmapLoaderConfig, spec, runtime: Runtime):
    """(PackReader, how it was found) for data.path, or the dataset's cached pack (packed if absent)."""
    threads = cfg.packing_threads(runtime.cores_per_process)
    if cfg.path:
        reader, how = open_pack(Path(cfg.path).expanduser(), cfg.verify, threads), "given"
        if cfg.stored_size is not None and stored_shape(cfg.stored_size, 0, False) != reader.shape[:2]:
            raise ConfigError(f"data.stored_size={cfg.stored_size} but the pack {reader.path} stores "
                              f"{reader.height}x{reader.width}; drop data.stored_size (it sizes the cache)")
    else:
        shape = stored_shape(cfg.stored_size, spec.image_size, spec.augment)
        path, how = ensure_cached_pack(spec, runtime.cache_root, shape, threads, progress=runtime.dist.is_main)
        reader, how = open_pack(path, cfg.verify, threads), f"cache, {how}"
    counts = (len(reader.indices(TRAIN)), len(reader.indices(VAL)))
    if reader.classes != spec.classes or counts != (len(spec.train_files), len(spec.val_files)):
        raise DataError(f"pack {reader.path} holds {counts[0]} train / {counts[1]} val images of classes "
                        f"{reader.classes[:8]}, but dataset={spec.name} has {len(spec.train_files)} / "
                        f"{len(spec.val_files)} of {spec.classes[:8]}; give the dataset settings it was "
                        "packed from, or set data.path=null to pack this dataset")
    if min(reader.height, reader.width) < spec.image_size:
        raise ConfigError(f"pack {reader.path} stores {reader.height}x{reader.width} images, smaller than "
                          f"dataset.image_size={spec.image_size}; repack at >= {spec.image_size} "
                          "(`python -m fastpipe.pack --size`, or data.stored_size for the cache)")
    return reader, how


def build_mmap_loader(cfg: MmapLoaderConfig, spec, runtime: Runtime, batch_size: int, seed: int, train: bool,
                      channels_last: bool) -> MmapLoader:
    """The training (shuffled per epoch, augmented per dataset.augment) or held-out loader."""
    dist, device = runtime.dist, runtime.device
    reader, how = resolve_pack(cfg, spec, runtime)
    pin = cfg.pin(device.type)
    if pin and not torch.cuda.is_available():
        raise ConfigError("data.pin_memory=true needs CUDA (pinned memory speeds host-to-GPU copies); "
                          "use data.pin_memory=auto")
    threads = cfg.reader_threads(runtime.cores_per_process)
    host = PackBatches(reader, reader.indices(TRAIN if train else VAL), batch_size, dist, seed, train,
                       cfg.drop_last and train, threads, cfg.prefetch, pin, device)
    if train and len(host) == 0:
        raise DataError(f"{len(host.indices)} training images give no full batch of {batch_size} per process; "
                        "lower train.batch_size or set data.drop_last=false")
    augment = spec.augment and train
    geometry = ("random-resized-crop+flip" if augment else
                "as stored" if reader.shape[:2] == (spec.image_size,) * 2 else "resize")
    transform = DeviceTransform(device, spec.image_size, augment, channels_last, seed + dist.rank)
    description = (f"mmap  pack={reader.path} ({how})  stored={reader.height}x{reader.width}  "
                   f"threads={threads}  prefetch={cfg.prefetch}  pin_memory={pin}  drop_last={host.drop_last}  "
                   f"verify={cfg.verify}  on {device.type}: {geometry}, normalise")
    return MmapLoader(host, transform, host, description)
