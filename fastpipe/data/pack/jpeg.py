"""JPEG packs: images encoded once at the stored size, decoded per batch on the GPU or in CPU threads.

Encoding (pack time) uses Pillow (libjpeg-turbo) at the given quality with full-resolution chroma
(4:4:4): at quality 90 and 256x256 the mean error against the raw pack is 3.06 (0..255) with
4:2:0 and 2.58 with 4:4:4, for 41 % more bytes (benchmarks/results/jpeg-fidelity/cpu-2026-12-01-347cbad/jpeg-fidelity.md).
Decoding uses torchvision: batched nvJPEG (``decode_jpeg(..., device="cuda")``) when
``data.decoder`` is gpu, libjpeg-turbo in a pool of threads (torchvision's op drops the GIL) when
it is cpu.
"""
from __future__ import annotations

import io
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import List

import numpy as np
import torch

from fastpipe.errors import DataError

# torchvision >= 0.29 warns on every call that its image codecs will move to TorchCodec; they are what
# this module uses, on purpose (torchvision 0.2x on the GPU machines has no such warning).
warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of TorchVision",
                        category=DeprecationWarning)


def encode(pixels: np.ndarray, quality: int) -> bytes:
    """H x W x 3 uint8 -> a baseline JPEG file, 4:4:4."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buf, format="JPEG", quality=quality, subsampling=0)
    return buf.getvalue()


def gather(reader, local: np.ndarray) -> List[torch.Tensor]:
    """The JPEG files of images ``local`` of one pack file, copied into one buffer (one tensor view each)."""
    starts, ends = reader.offsets[local], reader.offsets[local + 1]
    buf = np.empty(int((ends - starts).sum()), dtype=np.uint8)
    pos, views = 0, []
    for s, e in zip(starts, ends):
        buf[pos:pos + e - s] = reader._map[s:e]
        views.append((pos, pos + e - s))
        pos += e - s
    whole = torch.from_numpy(buf)
    return [whole[a:b] for a, b in views]


def decode_into(files: List[torch.Tensor], out: torch.Tensor) -> None:
    """JPEG files -> their pixels in ``out`` (N x 3 x H x W uint8), one after another (libjpeg-turbo);
    a file that does not decode, or to another size, raises RuntimeError."""
    from torchvision.io import ImageReadMode, decode_jpeg

    for i, file in enumerate(files):
        out[i].copy_(decode_jpeg(file, mode=ImageReadMode.RGB))


class Decoder:
    """A batch of JPEG files -> uint8 N x 3 x H x W: on ``device`` through nvJPEG (``where="gpu"``), or
    in ``threads`` CPU threads into (pinned) host memory (one thread: in the calling thread)."""

    def __init__(self, where: str, device: torch.device, shape, threads: int, pin: bool) -> None:
        self.where, self.device, self.shape, self.pin = where, device, tuple(shape), pin
        self.threads = max(1, threads)
        self.pool = (ThreadPoolExecutor(self.threads, thread_name_prefix="fastpipe-jpeg")
                     if where == "cpu" and self.threads > 1 else None)
        self._local = threading.local()

    def __call__(self, files: List[torch.Tensor]) -> torch.Tensor:
        from torchvision.io import ImageReadMode, decode_jpeg

        if self.where == "gpu":
            stream = getattr(self._local, "stream", None)
            if stream is None:  # one stream per reader thread: decodes overlap the training step
                stream = self._local.stream = torch.cuda.Stream(self.device)
            with torch.cuda.stream(stream):
                images = torch.stack(decode_jpeg(files, mode=ImageReadMode.RGB, device=self.device))
            stream.synchronize()  # this reader thread waits, not the training step
            return self._checked(images)
        out = torch.empty((len(files), 3, *self.shape), dtype=torch.uint8, pin_memory=self.pin)
        if self.pool is None:
            decode_into(files, out)
            return out
        step = -(-len(files) // self.threads)
        list(self.pool.map(lambda a: decode_into(files[a:a + step], out[a:a + step]), range(0, len(files), step)))
        return out

    def _checked(self, images: torch.Tensor) -> torch.Tensor:
        if tuple(images.shape[-2:]) != self.shape:
            raise DataError(f"a JPEG in the pack decodes to {tuple(images.shape[-2:])}, not the stored {self.shape}; "
                            "repack it")
        return images


class StreamSafe:
    """Wraps a batch preparation whose input images may be CUDA tensors made on a reader thread's
    stream: marks them used on the preparing stream, so their memory is not handed back to the
    reader's stream (and overwritten by the next decode) while this stream still reads them."""

    def __init__(self, prepare) -> None:
        self.prepare, self.device = prepare, prepare.device

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.prepare, "set_epoch"):
            self.prepare.set_epoch(epoch)

    def __call__(self, batch):
        images = batch[0]
        if images.is_cuda:
            images.record_stream(torch.cuda.current_stream(images.device))
        return self.prepare(batch)
