"""The pack cache: a dataset packed once under ``<cache>/packs``, keyed by what changes it.

``ensure_cached_pack`` is what ``data=mmap`` calls when no ``data.path`` is given: image datasets
(``ImageFiles``) are decoded and resized into an images pack (raw or JPEG, build.py); any other
dataset of fixed-shape samples is written sample by sample into a records pack (records.py).
``pack_images`` also serves ``python -m fastpipe.pack``. The format itself is in format.py.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
from pathlib import Path
from typing import Callable, Optional, Tuple

from fastpipe.data.cachedir import writing_into
from fastpipe.data.images import ImageFiles
from fastpipe.data.pack.build import build_images
from fastpipe.data.pack.format import DEFAULT_CHUNK_IMAGES, FORMAT_VERSION, JPEG_VERSION, TRAIN, VAL
from fastpipe.data.pack.images_job import ImagesJob
from fastpipe.data.pack.records import pack_records
from fastpipe.files import file_lock


def stored_shape(stored_size, image_size: int, augment: bool) -> Tuple[int, int]:
    """(height, width) to store: ``stored_size`` (int or [h, w]), or auto = image_size, and 8/7 of
    it with augmentation (224 -> 256) so random crops keep detail at ``image_size``."""
    if stored_size is None:
        side = round(image_size * 8 / 7) if augment else image_size
        return side, side
    h, w = (stored_size, stored_size) if isinstance(stored_size, int) else tuple(stored_size)
    return int(h), int(w)


def images_job(name: str, train: ImageFiles, val: ImageFiles, shape: Tuple[int, int], codec: str = "raw",
               quality: int = 90, chunk_images: int = DEFAULT_CHUNK_IMAGES,
               shard_bytes: Optional[int] = None) -> ImagesJob:
    """The pack of ``train`` then ``val`` resized to ``shape``: the resize data=default applies
    (torchvision Resize, antialiased, on the PIL image), so with ``shape == (image_size,
    image_size)`` a raw pack holds exactly what data=default feeds."""
    meta = {"dataset": name, "root": str(train.root), "stored_size": list(shape), "image_size": train.image_size,
            "train": len(train), "val": len(val)}
    key = images_key(name, train, val, shape, chunk_images, codec, quality, shard_bytes)
    return ImagesJob(train.files + val.files, train.labels + val.labels, [TRAIN] * len(train) + [VAL] * len(val),
                     train.classes, shape, codec, quality, chunk_images, meta, key, shard_bytes)


def pack_images(name: str, train: ImageFiles, val: ImageFiles, out, shape: Tuple[int, int], threads: int = 1,
                progress: bool = False, chunk_images: int = DEFAULT_CHUNK_IMAGES, codec: str = "raw",
                quality: int = 90, shard_bytes: Optional[int] = None, force: bool = False) -> Tuple[Path, str]:
    """Pack every image (train then val) into ``out`` over ``threads`` processes: (out, how: "packed
    now", "resumed (...)", "reused" when ``out`` already holds this pack, unless ``force``)."""
    job = images_job(name, train, val, shape, codec, quality, chunk_images, shard_bytes)
    return build_images(job, Path(out), threads, progress, force=force)


def images_key(name: str, train: ImageFiles, val: ImageFiles, shape: Tuple[int, int], chunk_images: int,
               codec: str = "raw", quality: int = 90, shard_bytes: Optional[int] = None) -> str:
    """A hash of what changes an images pack: format, files (paths, sizes, mtimes), labels, split,
    size; for JPEG the quality, for shards their size (a raw single-file pack keeps the key it had
    before those existed, so caches are not rebuilt)."""
    h = hashlib.blake2b(digest_size=8)
    settings = [FORMAT_VERSION, name, str(train.root), train.classes, list(shape), chunk_images, len(train), len(val)]
    if codec != "raw":
        settings = [JPEG_VERSION, codec, quality] + settings[1:]
    h.update(json.dumps(settings + ([shard_bytes] if shard_bytes else [])).encode())
    for split, ds in ((TRAIN, train), (VAL, val)):
        for path, label in zip(ds.files, ds.labels):
            st = os.stat(path)  # an edited or replaced file gives a new pack
            h.update(f"{split}\0{label}\0{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def records_key(identity: str, train, val) -> str:
    """A hash of what identifies a records pack: the dataset's config (its ``_target_`` and keys, and
    its own ``fingerprint`` attribute if it has one) and the split sizes."""
    h = hashlib.blake2b(digest_size=8)
    h.update(json.dumps([FORMAT_VERSION, identity, len(train), len(val) if val is not None else 0]).encode())
    return h.hexdigest()


def _leftovers(path: Path) -> list:
    """A dead builder's files of the pack ``path``: an older fastpipe's ``.NAME.tmp-PID`` and a
    partial file with its journal."""
    name = glob.escape(path.name)
    return [*path.parent.glob(f".{name}.tmp-*"), *path.parent.glob(f".{name}.partial"),
            *path.parent.glob(f".{name}.journal")]


def _clean_after_dead_writers(path: Path) -> None:
    # A reused pack: clean only if there is something to clean and no packer holds the lock now;
    # a read-only cache (packs made by someone else) is fine as it is.
    try:
        if not _leftovers(path):
            return
        with file_lock(path.parent / f".{path.name}.lock", wait=False):
            for tmp in _leftovers(path):
                tmp.unlink(missing_ok=True)
    except OSError:  # locked by a packer, or not ours to write
        pass


def _cached(folder: Path, filename: str, make: Callable[[Path], Path]) -> Tuple[Path, str]:
    """``folder/filename``, made by ``make(path)`` under a file lock unless it exists: (path, how it was
    found: "reused", "packed now", or "packed by another process" that held the lock)."""
    path = folder / filename
    if path.is_file():
        _clean_after_dead_writers(path)
        return path, "reused"
    lock_path = folder / f".{path.name}.lock"
    with writing_into(folder):  # the first write into the cache: an unwritable one is one clear line
        folder.mkdir(parents=True, exist_ok=True)
        lock_path.touch()
    with file_lock(lock_path):  # one DDP rank packs
        if path.is_file():  # another process packed it while this one waited
            return path, "packed by another process"
        for tmp in path.parent.glob(f".{glob.escape(path.name)}.tmp-*"):  # a dead writer's: we hold the lock
            tmp.unlink(missing_ok=True)
        return make(path), "packed now"


def ensure_cached_pack(splits, cache_root: Path, shape: Tuple[int, int], threads: int = 1, progress: bool = False,
                       chunk_images: int = DEFAULT_CHUNK_IMAGES, codec: str = "raw", quality: int = 90) -> Tuple[Path, str]:
    """The cached pack of ``splits`` (a DataSplits) under ``cache_root/packs``; ``shape`` sizes images."""
    folder = Path(cache_root) / "packs"
    if splits.is_images:
        job = images_job(splits.name, splits.train, splits.val, shape, codec, quality, chunk_images)
        tag = "" if codec == "raw" else f"-{codec}{quality}"
        path = folder / f"{splits.name}-{shape[0]}x{shape[1]}{tag}-{job.key}.fppack"
        if path.is_file():
            _clean_after_dead_writers(path)
            return path, "reused"
        with writing_into(folder):  # an unwritable cache is one clear line
            return build_images(job, path, threads, progress, trust_name=True)
    key = records_key(splits.identity, splits.train, splits.val)
    meta = {"dataset": splits.name, "identity": splits.identity}
    return _cached(folder, f"{splits.name}-records-{key}.fppack",
                   lambda path: pack_records(splits.train, splits.val, path, meta, progress, chunk_images))
