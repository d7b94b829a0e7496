"""Building an images pack: a pool of processes decodes, resizes (and JPEG-encodes) groups of images;
the pack is written as one file or as shards, resumable after a kill, one builder at a time.

Work is split into groups of ``chunk_images`` images (one checksum chunk each). Raw images have a
fixed size, so each worker writes its group straight into the file at its place (``os.pwrite``)
and hands back only the checksum; JPEG groups come back as bytes and are appended in order. The
main process only journals (journal.py) and draws the progress bar, so it is never the
bottleneck. Workers are forked (they never touch torch or CUDA), die with their parent, and decode
exactly as data=default does (decode_rgb, torchvision's antialiased Resize on the PIL image).
"""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np

from fastpipe import signals
from fastpipe.data.pack.format import DTYPE_JPEG, DTYPE_UINT8, TRAIN
from fastpipe.data.pack.journal import build_lock, partial_path
from fastpipe.data.pack.parts import (LAYOUT_NAME, Part, PartWriter, check_out, complete_file, plan_parts,
                                     remove_other_kind)
from fastpipe.errors import ConfigError, DataError

SHARD_SEED = 0  # the fixed shuffle of a sharded pack's training images (the same for every codec)


@dataclass
class ImagesJob:
    """What to pack: image files in pack order (train first), their labels and splits, and how."""

    files: List[str]
    labels: List[int]
    split: List[int]
    classes: List[str]
    shape: Tuple[int, int]  # stored (height, width)
    codec: str = "raw"  # raw | jpeg
    quality: int = 90
    chunk_images: int = 256
    meta: Optional[dict] = None
    key: str = ""  # what the pack is built from: reuse and resume require the same key
    shard_bytes: Optional[int] = None  # None: one file; else shards of about this many bytes

    def __post_init__(self) -> None:
        self.labels, self.split = np.asarray(self.labels, dtype=np.int64), np.asarray(self.split, dtype=np.uint8)

    @property
    def image_bytes(self) -> int:
        return self.shape[0] * self.shape[1] * 3

    def order(self) -> np.ndarray:
        """Item ids in the order they are stored: sharded packs shuffle the training images once
        (fixed seed), so every shard holds a sample of every class and sequential reads stay random."""
        ids = np.arange(len(self.files))
        if not self.shard_bytes:
            return ids
        train, val = ids[self.split == TRAIN], ids[self.split != TRAIN]
        return np.concatenate([np.random.default_rng(SHARD_SEED).permutation(train), val])


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


def _init_worker(job: ImagesJob, order: np.ndarray, parent: int) -> None:
    global _WORKER
    from fastpipe.runtime import die_with_parent

    signals.pool_worker_signals()  # the pool's terminate() ends it, whatever the parent held
    die_with_parent(parent)  # an orphan must not go on writing a file another builder now resumes
    _WORKER = _Worker(job, order)


def _encode_group(task: tuple) -> tuple:
    return _WORKER.encode_group(task)


def _jpeg_size(item: int) -> int:
    return _WORKER.jpeg_size(item)


# ----------------------------------------------------------------------------- main side
class _Pool:
    """A fork pool of ``workers`` processes, or the calling process itself for one worker."""

    def __init__(self, job: ImagesJob, order: np.ndarray, workers: int) -> None:
        self.pool, self.local = None, None
        if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
            self.pool = multiprocessing.get_context("fork").Pool(workers, _init_worker, (job, order, os.getpid()))
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


def _estimate_jpeg_bytes(job: ImagesJob, order: np.ndarray, pool: _Pool, samples: int = 64) -> float:
    picks = order[np.linspace(0, len(order) - 1, min(samples, len(order))).astype(int)]
    sizes = list(pool.map("jpeg_size", [int(i) for i in picks]))
    return float(np.mean(sizes))


def build_images(job: ImagesJob, out: Path, workers: int = 1, progress: bool = False, force: bool = False,
                 trust_name: bool = False) -> Tuple[Path, str]:
    """Build (or reuse, or resume) the pack ``job`` describes at ``out`` (a file, or a folder of
    shards with ``job.shard_bytes``): (out, how it was found: "reused", "packed by another process",
    "packed now", or "resumed (N of M images were already packed)"). ``trust_name``: an existing
    ``out`` is this pack (the cache, whose file name is the key)."""
    out = Path(out)
    if not force and complete_file(out, job.key, trust_name):
        return out, "reused"
    check_out(out, bool(job.shard_bytes), force)
    out.parent.mkdir(parents=True, exist_ok=True)
    with build_lock(out, str(out), quiet=not progress):
        if not force and complete_file(out, job.key, trust_name):  # finished while this one took the lock
            return out, "packed by another process"
        _remove_dead_tmp(out)
        if force:
            remove_other_kind(out, bool(job.shard_bytes))
        created = bool(job.shard_bytes) and not out.exists()
        if job.shard_bytes:
            if force and out.is_dir():
                shutil.rmtree(out)
            out.mkdir(exist_ok=True)
        try:
            done = _build(job, out, workers, progress)
        except ConfigError:  # refused before writing anything (a shard size too small): leave no empty folder
            if created:
                shutil.rmtree(out, ignore_errors=True)
            raise
    total = len(job.files)
    return out, "packed now" if done == 0 else f"resumed ({done} of {total} images were already packed)"


def _remove_dead_tmp(out: Path) -> None:
    # An older fastpipe's temporary file (``.NAME.tmp-PID``): it wrote under the same lock, so one seen now is dead.
    for tmp in out.parent.glob(f".{out.name}.tmp-*"):
        tmp.unlink(missing_ok=True)


def _size_text(n: float) -> str:
    """Bytes in --shard-size's own units (powers of 1000): ``786KB``, ``2.4MB``."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}B"


def _layout(job: ImagesJob, out: Path, order: np.ndarray, pool: _Pool) -> List[Part]:
    if not job.shard_bytes:
        return [Part(out.name, 0, len(order))]
    saved = out / LAYOUT_NAME
    try:
        kept = json.loads(saved.read_text())
        if kept.get("key") == job.key:
            return [Part(**p) for p in kept["parts"]]
    except (OSError, ValueError, TypeError, KeyError):
        pass
    per_image = job.image_bytes if job.codec == "raw" else _estimate_jpeg_bytes(job, order, pool) * 1.05
    per_shard = int(job.shard_bytes // per_image)
    if per_shard < job.chunk_images:  # shards are whole chunks: each would be larger than asked
        raise ConfigError(f"--shard-size {_size_text(job.shard_bytes)} holds {per_shard} images of about "
                          f"{_size_text(per_image)}, fewer than one chunk of {job.chunk_images} (--chunk-images): "
                          f"raise --shard-size to at least {_size_text(job.chunk_images * per_image)}, or lower "
                          f"--chunk-images to {max(1, per_shard)}")
    parts = plan_parts(job.split[order], job.chunk_images, per_shard)
    saved.write_text(json.dumps({"key": job.key, "parts": [p.__dict__ for p in parts]}))
    return parts


def _build(job: ImagesJob, out: Path, workers: int, progress: bool) -> int:
    """Write every part not already complete; returns the images found already packed."""
    order = job.order()
    groups = -(-len(order) // job.chunk_images)
    with signals.deferred():  # a stop signal raises between groups (signals.check), never inside the fork pool
        return _build_with(job, out, order, groups, workers, progress)


def _build_with(job: ImagesJob, out: Path, order: np.ndarray, groups: int, workers: int, progress: bool) -> int:
    pool = _Pool(job, order, max(1, min(workers, groups)))
    try:
        parts = _layout(job, out, order, pool)
        folder = out if job.shard_bytes else out.parent
        dtype = DTYPE_JPEG if job.codec == "jpeg" else DTYPE_UINT8
        writers = [PartWriter(folder / p.file, p, job, order, dtype, sharded=bool(job.shard_bytes)) for p in parts]
        already = sum(w.resume() for w in writers)
        tasks = [(i, g, start, stop, (str(partial_path(w.final)), w.offset_of(start)))
                 for i, w in enumerate(writers) for g, start, stop in w.todo()]
        bar = _bar(out, len(order), already, progress)
        for part, group, crc, data, sizes in pool.map("encode_group", tasks, ordered=job.codec == "jpeg"):
            signals.check()
            w = writers[part]
            w.add(group, crc, data, sizes)
            bar.update(w.group_size(group))
            if w.finished():
                w.finish()
        bar.close()
        for w in writers:
            if not w.done:  # every group was already in the partial file
                w.finish()
        if job.shard_bytes:
            from fastpipe.data.pack.shards import write_index

            write_index(out, job, [w.summary() for w in writers])
            (out / LAYOUT_NAME).unlink(missing_ok=True)
        return already
    finally:
        pool.close()


def _bar(out: Path, total: int, initial: int, progress: bool):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=f"packing {out.name}", unit="img", smoothing=0.1,
                disable=None if progress else True)  # None: no bar when stderr is not a terminal
