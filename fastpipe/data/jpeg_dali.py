"""data.decoder=dali for JPEG packs: each batch's JPEG files decoded by a DALI pipeline.

``fn.external_source`` takes the files the reader thread gathered, ``fn.decoders.image`` decodes them
(``mixed`` on CUDA: nvJPEG with the hardware JPEG engine, DALI's own CUDA stream and thread pool;
``cpu`` on a CPU run) and the batch is copied into a torch tensor (N x H x W x 3, handed on as an
N x 3 x H x W view, like a raw pack's pixels). torchvision decodes one nvJPEG call at a time per
process; here each reader thread takes a pipeline of its own from a pool, so several batches decode
at once. Pipelines outlive epochs (the reader threads do not).
"""
from __future__ import annotations

import queue
import threading
from typing import List

import torch

from fastpipe.data.dali import import_dali
from fastpipe.errors import DataError


class DaliDecoder:
    """A batch of JPEG files (uint8 tensors) -> uint8 N x 3 x H x W on ``device`` (host memory on a
    CPU run), at most ``max_batch`` files a batch, ``threads`` DALI CPU threads a pipeline."""

    where = "dali"

    def __init__(self, device: torch.device, shape, threads: int, max_batch: int) -> None:
        self.dali = import_dali("data.decoder=dali", "data.decoder=auto")
        self.device, self.shape, self.threads, self.max_batch = device, tuple(shape), max(1, threads), max_batch
        self.on_gpu = device.type == "cuda"
        self.kind = "mixed" if self.on_gpu else "cpu"
        self._free: "queue.SimpleQueue" = queue.SimpleQueue()
        self._local = threading.local()

    @property
    def on_device(self) -> bool:
        return self.on_gpu

    def describe(self) -> str:
        return f"dali ({self.kind}, {self.threads} threads a pipeline)"

    def _pipeline(self):
        fn, types = self.dali.fn, self.dali.types

        def graph():
            jpegs = fn.external_source(name="jpegs", dtype=types.UINT8, ndim=1)
            return fn.decoders.image(jpegs, device=self.kind, output_type=types.RGB)

        device_id = (self.device.index if self.device.index is not None else torch.cuda.current_device()) \
            if self.on_gpu else None
        pipe = self.dali.pipeline_def(graph)(batch_size=self.max_batch, num_threads=self.threads,
                                             device_id=device_id, prefetch_queue_depth=1)
        pipe.build()
        return pipe

    def __call__(self, files: List[torch.Tensor]) -> torch.Tensor:
        if len(files) > self.max_batch:
            raise ValueError(f"{len(files)} files in one batch; this decoder was built for {self.max_batch}")
        try:
            pipe = self._free.get_nowait()
        except queue.Empty:
            pipe = self._pipeline()
        try:
            pipe.feed_input("jpegs", [f.numpy() for f in files])
            (decoded,) = pipe.run()
            batch = decoded.as_tensor()
            if tuple(batch.shape()[1:3]) != self.shape:
                raise DataError(f"a JPEG in the pack decodes to {tuple(batch.shape()[1:3])}, not the stored "
                                f"{self.shape}; repack it")
            return self._to_torch(batch).permute(0, 3, 1, 2)
        finally:
            self._free.put(pipe)

    def _to_torch(self, batch) -> torch.Tensor:
        """DALI's batch copied into a torch tensor (on the reader thread's own stream, complete on return)."""
        if not self.on_gpu:
            out = torch.empty(batch.shape(), dtype=torch.uint8)
            self.dali.feed_ndarray(batch, out)
            return out
        stream = getattr(self._local, "stream", None)
        if stream is None:  # one stream per reader thread: copies overlap the training step
            stream = self._local.stream = torch.cuda.Stream(self.device)
        with torch.cuda.stream(stream):  # allocated on the stream that writes it
            out = torch.empty(batch.shape(), dtype=torch.uint8, device=self.device)
            self.dali.feed_ndarray(batch, out, cuda_stream=stream)
        stream.synchronize()
        return out
