"""The processes that make an images pack's groups: decode, resize (and JPEG-encode) ``chunk_images``
images at a time.

Raw images have a fixed size, so each worker writes its group straight into the file at its place
(``os.pwrite``) and hands back only the checksum; JPEG groups come back as bytes, which the main
process appends in order (build.py). Workers are forked (they never touch torch or CUDA), die with
their parent, and decode exactly as data=default does (decode_rgb, torchvision's antialiased Resize
on the PIL image).
"""
from __future__ import annotations

import multiprocessing
import os
import zlib
from typing import Optional

import numpy as np

from fastpipe import signals
from fastpipe.processes import fork_pool
from fastpipe.data.pack.images_job import ImagesJob
from fastpipe.errors import DataError


# ----------------------------------------------------------------------------- worker side
class _Worker:
    """What one worker process (or the main process, with one worker) needs to make groups."""

    def __init__(self, job: ImagesJob, order: np.ndarray) -> None:
        from torchvision import transforms

        self.job, self.order, self.fds = job, order, {}
        self.resize = transforms.Resize(job.shape, antialias=True)

    def pixels(self, item: int) -> np.ndarray:
        from fastpipe.data.images import decode_rgb

        path = self.job.files[item]
        try:
            return np.asarray(self.resize(decode_rgb(path)))
        except Exception as exc:  # name the file: "cannot identify image" alone is no help
            raise DataError(f"cannot read image {path}: {exc}; remove or replace the file") from None

    def encode_group(self, task: tuple) -> tuple:
        """(part, group, start, stop, target): pixels of positions start..stop of the pack order; raw:
        written at target = (path, offset), returns (part, group, crc, None, None); JPEG: returns
        the bytes and each image's length."""
        from fastpipe.data.pack.jpeg import encode

        part, group, start, stop, target = task
        items = self.order[start:stop]
        if self.job.codec == "jpeg":
            files = [encode(self.pixels(int(i)), self.job.quality) for i in items]
            data = b"".join(files)
            return part, group, zlib.crc32(data), data, [len(f) for f in files]
        data = b"".join(np.ascontiguousarray(self.pixels(int(i))).tobytes() for i in items)
        path, offset = target
        fd = self.fds.get(path)
        if fd is None:
            fd = self.fds[path] = os.open(path, os.O_WRONLY)
        view = memoryview(data)
        while view:  # pwrite may write less than asked
            view = view[os.pwrite(fd, view, offset + len(data) - len(view)):]
        return part, group, zlib.crc32(data), None, None

    def jpeg_size(self, item: int) -> int:
        from fastpipe.data.pack.jpeg import encode

        return len(encode(self.pixels(item), self.job.quality))

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)


_WORKER: Optional[_Worker] = None  # in each pool process


def _init_worker(job: ImagesJob, order: np.ndarray) -> None:
    global _WORKER
    _WORKER = _Worker(job, order)


def _encode_group(task: tuple) -> tuple:
    return _WORKER.encode_group(task)


def _jpeg_size(item: int) -> int:
    return _WORKER.jpeg_size(item)


# ----------------------------------------------------------------------------- main side
class Pool:
    """A fork pool of ``workers`` processes, or the calling process itself for one worker."""

    def __init__(self, job: ImagesJob, order: np.ndarray, workers: int) -> None:
        self.pool, self.local = None, None
        if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
            self.pool = fork_pool(workers, _init_worker, (job, order))
        else:
            self.local = _Worker(job, order)

    def map(self, fn: str, tasks, ordered: bool = True):
        """``fn`` ("encode_group" or "jpeg_size") over ``tasks``, in order unless ``ordered`` is false."""
        if self.pool is None:
            return map(getattr(self.local, fn), tasks)
        work = {"encode_group": _encode_group, "jpeg_size": _jpeg_size}[fn]
        # a stop signal is checked while waiting, too: its workers may have died of it
        return signals.pool_results((self.pool.imap if ordered else self.pool.imap_unordered)(work, tasks, chunksize=1))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
        if self.local is not None:
            self.local.close()
