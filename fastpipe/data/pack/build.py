"""Building an images pack: a pool of processes decodes, resizes (and JPEG-encodes) groups of images;
the pack is written as one file or as shards, resumable after a kill, one builder at a time.

Work is split into groups of ``chunk_images`` images (one checksum chunk each), made by a pool of
processes (pool.py); the files being written and their journals are parts.py's. The main process
only journals (journal.py) and draws the progress bar, so it is never the bottleneck.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import List, Tuple

import numpy as np

from fastpipe import signals
from fastpipe.data.pack.format import DTYPE_JPEG, DTYPE_UINT8
from fastpipe.data.pack.images_job import ImagesJob
from fastpipe.data.pack.journal import build_lock, partial_path
from fastpipe.data.pack.parts import (LAYOUT_NAME, Part, PartWriter, check_out, complete_file, plan_parts,
                                      refuse_another_pack, remove_other_kind)
from fastpipe.data.pack.pool import Pool
from fastpipe.errors import ConfigError


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
    refuse_another_pack(out, {"build_key": job.key}, force or trust_name)  # the cache: its name is the key
    out.parent.mkdir(parents=True, exist_ok=True)
    with build_lock(out, str(out), quiet=not progress):
        if not force and complete_file(out, job.key, trust_name):  # finished while this one took the lock
            return out, "packed by another process"
        refuse_another_pack(out, {"build_key": job.key}, force or trust_name)  # another packer's, finished meanwhile
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


def _estimate_jpeg_bytes(job: ImagesJob, order: np.ndarray, pool: Pool, samples: int = 64) -> float:
    picks = order[np.linspace(0, len(order) - 1, min(samples, len(order))).astype(int)]
    sizes = list(pool.map("jpeg_size", [int(i) for i in picks]))
    return float(np.mean(sizes))


def _layout(job: ImagesJob, out: Path, order: np.ndarray, pool: Pool) -> List[Part]:
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
    pool = Pool(job, order, max(1, min(workers, groups)))
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
