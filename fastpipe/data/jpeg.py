"""JPEG packs: images encoded once at the stored size, decoded per batch on the GPU or in CPU threads.

Encoding (pack time) uses Pillow (libjpeg-turbo) at the given quality with full-resolution chroma
(4:4:4): at quality 90 and 256x256 the mean error against the raw pack is 3.06 (0..255) with
4:2:0 and 2.58 with 4:4:4, for 41 % more bytes (benchmarks/results/cpu-jpeg-fidelity.md).
Decoding uses torchvision: batched nvJPEG (``decode_jpeg(..., device="cuda")``) when
``data.decoder`` is gpu, libjpeg-turbo in a pool of threads (torchvision's op drops the GIL) when
it is cpu, and both on every batch at once when it is gpu+cpu.
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


# gpu+cpu: images per nvJPEG call (large enough to keep the batched call efficient) and per CPU
# thread's turn (small, so the last CPU chunk of a batch does not hold the batch up).
GPU_CHUNK = 128
CPU_CHUNK = 4


class _Cursor:
    """The next undecoded image of a batch, taken in chunks by the GPU and the CPU threads alike."""

    def __init__(self, count: int) -> None:
        self.count, self.next, self.lock = count, 0, threading.Lock()

    def take(self, most: int):
        with self.lock:
            a = self.next
            self.next = min(self.count, a + most)
            return (a, self.next) if self.next > a else None


class Decoder:
    """A batch of JPEG files -> uint8 N x 3 x H x W.

    ``where``: ``gpu``, one batched nvJPEG call on ``device``; ``cpu``, ``threads`` CPU threads into
    (pinned) host memory; ``gpu+cpu``, both on the same batch at once: the reader thread hands
    chunks to nvJPEG while the threads decode chunks of the rest, so the batch takes what the two
    together decode (torchvision serialises nvJPEG calls within a process, so the GPU alone is one
    decoder however many reader threads call it). ``counts`` tallies the images each side decoded."""

    def __init__(self, where: str, device: torch.device, shape, threads: int, pin: bool) -> None:
        self.where, self.device, self.shape, self.pin = where, device, tuple(shape), pin
        self.threads = max(1, threads)
        self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="fastpipe-jpeg") if where != "gpu" else None
        self.counts = {"gpu": 0, "cpu": 0}
        self._local, self._count_lock = threading.local(), threading.Lock()

    def __call__(self, files: List[torch.Tensor]) -> torch.Tensor:
        if self.where == "gpu":
            return self._gpu(files)
        if self.where == "cpu":
            return self._cpu(files)
        return self._both(files)

    def probe(self, files: List[torch.Tensor]) -> None:
        """Decode ``files`` on each side this decoder uses (raises what the side's decode raises), uncounted."""
        if "gpu" in self.where:
            self._gpu(files)
        if "cpu" in self.where:
            self._cpu(files)
        self.counts = {"gpu": 0, "cpu": 0}

    def _stream(self) -> torch.cuda.Stream:
        stream = getattr(self._local, "stream", None)
        if stream is None:  # one stream per reader thread: decodes overlap the training step
            stream = self._local.stream = torch.cuda.Stream(self.device)
        return stream

    def _tally(self, side: str, images: int) -> None:
        with self._count_lock:
            self.counts[side] += images

    def _gpu(self, files: List[torch.Tensor]) -> torch.Tensor:
        stream = self._stream()
        with torch.cuda.stream(stream):
            images = torch.stack(_decode(files, self.device))
        stream.synchronize()  # this reader thread waits, not the training step
        self._tally("gpu", len(files))
        return self._checked(images)

    def _cpu(self, files: List[torch.Tensor]) -> torch.Tensor:
        out = torch.empty((len(files), 3, *self.shape), dtype=torch.uint8, pin_memory=self.pin)
        step = -(-len(files) // self.threads)
        list(self.pool.map(lambda a: self._cpu_range(files, out, a, min(a + step, len(files))),
                           range(0, len(files), step)))
        return out

    def _cpu_range(self, files, out: torch.Tensor, a: int, b: int) -> None:
        for i in range(a, b):
            out[i].copy_(self._checked(_decode(files[i], None)))
        self._tally("cpu", b - a)

    def _both(self, files: List[torch.Tensor]) -> torch.Tensor:
        cursor = _Cursor(len(files))
        host = torch.empty((len(files), 3, *self.shape), dtype=torch.uint8, pin_memory=self.pin)

        def cpu_turns():
            done = []
            while (chunk := cursor.take(CPU_CHUNK)) is not None:
                self._cpu_range(files, host, *chunk)
                done.append(chunk)
            return done

        futures = [self.pool.submit(cpu_turns) for _ in range(self.threads)]
        gpu_parts = []  # kept alive until the stream has finished with them (nvJPEG writes on its own stream)
        stream = self._stream() if self.device.type == "cuda" else None  # None: no-op context (CPU tests)
        with torch.cuda.stream(stream):
            while (chunk := cursor.take(GPU_CHUNK)) is not None:
                gpu_parts.append((chunk, _decode(files[chunk[0]:chunk[1]], self.device)))
                self._tally("gpu", chunk[1] - chunk[0])
            cpu_chunks = [c for f in futures if not f.cancel() for c in f.result()]  # cancel: never started
            out = torch.empty((len(files), 3, *self.shape), dtype=torch.uint8, device=self.device)
            for (a, b), images in gpu_parts:
                out[a:b] = self._checked(torch.stack(images))
            for a, b in cpu_chunks:
                out[a:b].copy_(host[a:b], non_blocking=self.pin)
        if stream is not None:
            stream.synchronize()
        return out

    def _checked(self, images: torch.Tensor) -> torch.Tensor:
        if tuple(images.shape[-2:]) != self.shape:
            raise DataError(f"a JPEG in the pack decodes to {tuple(images.shape[-2:])}, not the stored {self.shape}; "
                            "repack it")
        return images


def _decode(files, device):
    """torchvision's decode_jpeg of one file (on the CPU) or a list of them (on ``device``), as RGB."""
    from torchvision.io import ImageReadMode, decode_jpeg

    return decode_jpeg(files, mode=ImageReadMode.RGB, device=device) if device is not None \
        else decode_jpeg(files, mode=ImageReadMode.RGB)


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
