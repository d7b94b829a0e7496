"""data.decoder=dali: a JPEG pack's batches decoded by one NVIDIA DALI pipeline per loader.

PackBatches' reader threads gather each batch's JPEG files out of the map (``PackFiles``), in the
order the sampler or the lane plan gives: the same indices, epochs and seeds as the other decoders.
DALI's ``fn.external_source`` takes them batch by batch in that order and ``fn.decoders.image``
decodes them ``data.prefetch`` batches ahead of the step, asynchronously: ``mixed`` when training on
CUDA (the GPU's hardware JPEG decoder for ``data.hw_decoder_load`` of the files, nvJPEG for the
rest), ``cpu`` otherwise. A batch leaves DALI as uint8 N x H x W x 3 through DLPack, without a copy,
bound to the stream current when it is taken (DeviceLoader's preparing stream, so DALI frees its
memory in that stream's order); seen as N x 3 x H x W, it is prepared as a raw pack's batch is
(augment.py: random-resized-crop + flip or resize, normalise). The labels are copied out of DALI's
memory: they go on to the training step's stream.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import torch

from fastpipe.config import MmapLoaderConfig
from fastpipe.data.dali import decode_options, import_dali
from fastpipe.errors import DataError
from fastpipe.runtime import Runtime

# DALI's pipeline error names the operator, then what it met ("encountered:" and a line).
ENCOUNTERED = re.compile(r"encountered:\s*(\S.*)")


def decoder_where(device_type: str) -> str:
    """DALI's decoder for a run on ``device_type``: ``mixed`` (GPU) on CUDA, else ``cpu``."""
    return "mixed" if device_type == "cuda" else "cpu"


def describe_dali(cfg: MmapLoaderConfig, runtime: Runtime) -> str:
    """The decoder's words in the loader's description (graph.txt)."""
    where = decoder_where(runtime.device.type)
    share = f"hw_decoder_load={cfg.hw_decoder_load}, " if where == "mixed" else ""
    return (f"decoder=dali ({where}, {share}num_threads={cfg.decoding_threads(runtime.cores_per_process)}, "
            f"prefetch_queue_depth={cfg.prefetch})")


class FileFeed:
    """The pipeline's external source: the current epoch's batches of (JPEG files, labels), one a call;
    StopIteration ends the epoch."""

    def __init__(self) -> None:
        self.batches = iter(())

    def __call__(self):
        return next(self.batches)

    def start(self, batches) -> None:
        """Feed ``batches`` from now on; the earlier epoch's reader (its threads) is stopped."""
        close = getattr(self.batches, "close", None)
        if close is not None:
            close()
        self.batches = batches


def _decoding(step, path, *args, **kwargs):
    """``step(*args, **kwargs)``, with a JPEG DALI cannot decode raised as one DataError."""
    try:
        return step(*args, **kwargs)
    except RuntimeError as exc:
        text = str(exc)
        if "fn.decoders.image" not in text:
            raise
        found = ENCOUNTERED.search(text)
        said = found.group(1).strip().rstrip(" :") if found else "no detail"
        raise DataError(f"DALI's decoder fails on a JPEG of pack {path} (DALI: {said}); check the pack with "
                        f"`python -m fastpipe.pack --verify {path}` and repack it") from exc


class DaliDecoded:
    """data=mmap's host side for a JPEG pack decoded by DALI: ``host`` (PackBatches over PackFiles)
    through ``pipe``, whose external source is ``feed``; yields (uint8 N x 3 x H x W, int64 labels) on
    the training device. ``len`` and ``batch_size`` are the host's."""

    thread_bound = True  # its pipeline runs in the thread that built it: never read ahead in another

    def __init__(self, host, pipe, feed: FileFeed, device: torch.device, stored, path: Path) -> None:
        self.host, self.pipe, self.feed, self.device = host, pipe, feed, device
        self.stored, self.path, self.batch_size = tuple(stored), path, host.batch_size
        self._generation = 0  # which iteration owns the pipeline

    def __len__(self) -> int:
        return len(self.host)

    def _finish(self) -> None:
        """End the pipeline's epoch: an iteration left early (max_steps, grad_accum's leftover batches,
        a first-batch check) has batches decoded ahead that are not this epoch's."""
        self.feed.start(iter(()))
        self.pipe.schedule_run()  # the feed ends the epoch, if it had not ended
        while not self.pipe.empty():
            self.pipe.outputs()
        self.pipe.reset()

    def __iter__(self):
        self._finish()
        self._generation += 1
        mine = self._generation
        self.feed.start(iter(self.host))
        _decoding(self.pipe.schedule_run, self.path)  # the first run schedules prefetch_queue_depth batches
        while mine == self._generation and not self.pipe.empty():
            batch = self._take()
            _decoding(self.pipe.schedule_run, self.path)  # one more batch decoding while this one trains
            yield batch

    def _take(self):
        stream = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
        images, labels = _decoding(self.pipe.outputs, self.path, cuda_stream=stream)
        other = next((shape[:2] for shape in images.shape() if tuple(shape[:2]) != self.stored), None)
        if other is not None:
            raise DataError(f"a JPEG in pack {self.path} decodes to {tuple(other)}, not the stored {self.stored}; "
                            "repack it")
        images = torch.from_dlpack(images.as_tensor())
        # The labels go on to the training step's stream, which DALI does not order its frees after: copied
        # out (the images are read by the preparation alone, on the stream their memory is freed in).
        return images.permute(0, 3, 1, 2), torch.from_dlpack(labels.as_tensor()).clone()


def _graph(dali, feed: FileFeed, decoder: str, options: dict):
    fn, types = dali.fn, dali.types
    files, labels = fn.external_source(source=feed, num_outputs=2, batch=True, dtype=[types.UINT8, types.INT64])
    images = fn.decoders.image(files, **options)
    return images, labels.gpu() if decoder == "mixed" else labels


def dali_decoded(host, cfg: MmapLoaderConfig, runtime: Runtime, stored, path: Path,
                 gpu: Optional[torch.device]) -> DaliDecoded:
    """``host``'s batches of JPEG files decoded by a new DALI pipeline on ``gpu`` (this rank's GPU), or
    on the CPU when training there (``gpu`` None)."""
    dali = import_dali("data.decoder=dali", "decode with torchvision: data.decoder=auto")
    decoder, feed = decoder_where(runtime.device.type), FileFeed()
    pipe = dali.pipeline_def(_graph)(
        dali, feed, decoder, decode_options(decoder, cfg, roi=False, rgb=dali.types.RGB),
        batch_size=host.batch_size, num_threads=cfg.decoding_threads(runtime.cores_per_process),
        device_id=None if gpu is None else gpu.index, prefetch_queue_depth=cfg.prefetch,
        exec_dynamic=True)  # outputs handed over without a copy, bound to the stream that takes them
    pipe.build()
    return DaliDecoded(host, pipe, feed, runtime.device, stored, path)
