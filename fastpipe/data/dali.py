"""data=dali: NVIDIA DALI pipelines over the dataset's image files.

``fn.readers.file`` reads this rank's shard, the JPEGs are decoded on the GPU (``mixed``: nvJPEG
and the hardware JPEG engine) when training runs on CUDA, or by DALI's CPU threads otherwise
(a CPU-only pipeline, ``device_id=None``), resized (or randomly cropped and flipped per
``dataset.augment``) and normalised by ``fn.crop_mirror_normalize`` with the ImageNet statistics
every loader uses, and handed to PyTorch by DALI's own ``DALIGenericIterator``.
"""
from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Optional

from fastpipe.config import DaliLoaderConfig
from fastpipe.data.device import MEAN, STD
from fastpipe.data.splits import DataSplits
from fastpipe.errors import ConfigError, DataError, EnvironmentProblem, no_full_batch
from fastpipe.runtime import Runtime

READER = "Reader"  # the reader's name: the iterator reads epoch and shard sizes from it
INSTALL_HINT = ('pip install "fastpipe[dali]" (it brings nvidia-dali-cuda130, for CUDA 13 drivers; on a '
                'CUDA 12 setup install nvidia-dali-cuda120 instead)')


def import_dali(who: str = "data=dali", instead: str = "choose another loader: data=default") -> SimpleNamespace:
    """DALI's modules, or an EnvironmentProblem: ``who`` needs the package, how to install it, or ``instead``."""
    try:
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
    except ImportError as exc:
        raise EnvironmentProblem(f"{who} needs NVIDIA DALI, which cannot be imported here ({exc}); "
                                 f"install it: {INSTALL_HINT}, or {instead}") from exc
    return SimpleNamespace(fn=fn, pipeline_def=pipeline_def, types=types,
                           Iterator=DALIGenericIterator, LastBatchPolicy=LastBatchPolicy)


def decode_options(decoder: str, cfg, roi: bool, rgb) -> dict:
    """The decoder's arguments. The EXIF orientation is not applied, as data=default's and the packs'
    decode (PIL, like torchvision's ImageFolder) does not apply it: every loader trains on the same
    pixels. Fancy (libjpeg-style) chroma upsampling is asked for whole-image GPU
    decodes only: for ROI (random-crop) decodes with nvJPEG < 13.2 nvImageCodec declines it (edge
    pixels may come out wrong) and prints a warning for every image (thousands a second on an H200).
    ``cfg``: a loader's config with ``hw_decoder_load`` (and ``jpeg_fancy_upsampling``; none: on)."""
    options = {"device": decoder, "output_type": rgb, "adjust_orientation": False}
    if decoder == "mixed":
        fancy = getattr(cfg, "jpeg_fancy_upsampling", True) and not roi
        options.update(hw_decoder_load=cfg.hw_decoder_load, jpeg_fancy_upsampling=fancy)
    return options


def _graph(dali, files, labels, shard_id, num_shards, train, augment, size, decoder, on_gpu, cfg, layout):
    """The pipeline body: read -> decode (+ random crop) -> resize -> crop_mirror_normalize."""
    fn, types = dali.fn, dali.types
    jpegs, labels = fn.readers.file(
        files=files, labels=labels, shard_id=shard_id, num_shards=num_shards, name=READER,
        random_shuffle=train,
        # Shards padded to whole batches: every rank runs the same number of steps, and each epoch
        # starts at its shard's start (PARTIAL then cuts the padding off the held-out split).
        pad_last_batch=True,
        stick_to_shard=not train)  # held-out: each rank always reads its own slice
    decode = decode_options(decoder, cfg, roi=augment, rgb=types.RGB)
    mirror = 0
    if augment:  # torchvision RandomResizedCrop's defaults; only the crop window is decoded
        images = fn.decoders.image_random_crop(jpegs, random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3],
                                               num_attempts=10, **decode)
        mirror = fn.random.coin_flip(probability=0.5)
    else:
        images = fn.decoders.image(jpegs, **decode)
    # Linear + antialias: the triangle filter PIL's bilinear Resize (data=default) uses.
    images = fn.resize(images, resize_x=size, resize_y=size, interp_type=types.INTERP_LINEAR, antialias=True)
    if on_gpu and decoder == "cpu":
        images = images.gpu()  # uint8 over PCIe (4x fewer bytes than float); normalise there
    images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout=layout, mirror=mirror,
                                      mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD])
    return images, labels.gpu() if on_gpu else labels


# DALI's image decoders (CPU and mixed) end their error with the file reader's name for the sample.
FAILED_SAMPLE = re.compile(r"Failed to decode sample #\d+ : (.+)")


def decode_failure(exc: RuntimeError) -> Optional[DataError]:
    """A pipeline error from decoding an image -> one DataError naming the file (or, when DALI does
    not name it, how to find it); None for any other pipeline error."""
    text = str(exc)
    found = FAILED_SAMPLE.search(text)
    if found:
        return DataError(f"cannot read image {found.group(1).strip()}: DALI's decoder fails on it; remove or "
                         "replace the file (data=default says what is wrong with it)")
    if "fn.decoders." in text:
        return DataError("data=dali cannot decode an image of this batch, and DALI does not say which: run "
                         "data=default, which names the file, then remove or replace it")
    return None


def _decoding(step, *args, **kwargs):
    """``step(*args, **kwargs)``, with an image DALI cannot decode raised as one DataError."""
    try:
        return step(*args, **kwargs)
    except RuntimeError as exc:
        failure = decode_failure(exc)
        if failure is None:
            raise
        raise failure from exc


class DaliLoader:
    """DALIGenericIterator -> (float NCHW images, int64 labels) on the training device."""

    def __init__(self, iterator, hwc: bool, description: str) -> None:
        self.iterator, self.hwc, self.description = iterator, hwc, description
        self.epoch = 0
        self._open = False  # an epoch was started and not read to its end

    def __len__(self) -> int:
        return len(self.iterator)

    def describe(self) -> str:
        return self.description

    def set_epoch(self, epoch: int) -> None:
        """Recorded only: DALI's reader moves to its next shuffle (and shard) at each epoch end."""
        self.epoch = epoch

    def _drain(self) -> None:
        # DALI cannot reset mid-epoch; read out the rest (e.g. batches left over by grad_accum).
        try:
            while True:
                _decoding(next, self.iterator)
        except StopIteration:
            pass  # auto_reset: the next epoch is ready

    def __iter__(self):
        if self._open:
            self._drain()
        self._open = True
        while True:
            try:
                outputs = _decoding(next, self.iterator)
            except StopIteration:
                break
            images, labels = outputs[0]["images"], outputs[0]["labels"]
            if labels.numel() == 0:  # PARTIAL: a shorter shard can end on an empty batch
                continue
            if self.hwc:  # NHWC memory seen as NCHW: channels_last without a copy
                images = images.permute(0, 3, 1, 2)
            yield images, labels.view(-1).long()
        self._open = False


def build_dali_loader(cfg: DaliLoaderConfig, splits: DataSplits, runtime: Runtime, batch_size: int, seed: int,
                      train: bool, channels_last: bool, subset=None) -> DaliLoader:
    """The training (sharded, shuffled, augmented per dataset.augment) or held-out DALI loader (only
    the files at the positions ``subset``, when given)."""
    if not splits.is_images:
        raise ConfigError(f"data=dali decodes image files, but dataset={splits.name} gives other samples; "
                          "use data=default or data=mmap")
    dali = import_dali()
    dist, device = runtime.dist, runtime.device
    images = splits.train if train else splits.val
    keep = range(len(images)) if subset is None else [int(i) for i in subset]
    files, labels = [images.files[i] for i in keep], [images.labels[i] for i in keep]
    decoder = cfg.decoder_for(device.type)
    on_gpu = device.type == "cuda"
    threads = cfg.threads(runtime.cores_per_process)
    shard = len(files) // dist.world_size  # the smallest shard
    if not train:  # PARTIAL: the last batch is short; each held-out sample is counted exactly once
        policy = dali.LastBatchPolicy.PARTIAL
        batch_size = max(1, min(batch_size, -(-len(files) // dist.world_size)))
    else:
        policy = dali.LastBatchPolicy.DROP if cfg.drop_last else dali.LastBatchPolicy.PARTIAL
        if cfg.drop_last and shard < batch_size:
            raise no_full_batch(len(files), batch_size, dist.world_size)
    layout = "HWC" if channels_last else "CHW"
    pipe = dali.pipeline_def(_graph)(
        dali, [str(f) for f in files], [int(x) for x in labels], dist.rank, dist.world_size, train,
        images.augment and train, images.image_size, decoder, on_gpu, cfg, layout,
        batch_size=batch_size, num_threads=threads, device_id=(device.index or 0) if on_gpu else None,
        seed=(seed + dist.rank) % 2**31,  # each rank its own augmentation stream
        prefetch_queue_depth=cfg.prefetch_queue_depth, exec_dynamic=cfg.exec_dynamic)
    # _decoding: the iterator already runs the pipeline for its first batch
    iterator = _decoding(dali.Iterator, [pipe], ["images", "labels"], reader_name=READER, last_batch_policy=policy,
                         auto_reset=True)
    where = "GPU (mixed: nvJPEG + HW decoder)" if decoder == "mixed" else "CPU"
    description = (f"dali  decode={decoder} on {where}  num_threads={threads}  "
                   f"prefetch_queue_depth={cfg.prefetch_queue_depth}  exec_dynamic={cfg.exec_dynamic}  shard={dist.rank}/{dist.world_size}  "
                   f"last_batch={policy.name}" + (f"  hw_decoder_load={cfg.hw_decoder_load}" if decoder == "mixed" else ""))
    return DaliLoader(iterator, channels_last, description)
