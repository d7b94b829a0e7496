"""The pack cache: a dataset packed once under ``<cache>/packs``, keyed by what changes it.

``ensure_cached_pack`` is what ``data=mmap`` calls when no ``data.path`` is given: image datasets
(``ImageFiles``) are decoded and resized into an images pack; any other dataset of fixed-shape
samples is written sample by sample into a records pack (records.py). ``pack_images`` also serves
``python -m fastpipe.pack``. The format itself is in packfile.py.
"""
from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Tuple

from torchvision import transforms

from fastpipe.data.cachedir import writing_into
from fastpipe.data.images import ImageFiles
from fastpipe.data.packfile import DEFAULT_CHUNK_IMAGES, FORMAT_VERSION, TRAIN, VAL, PackWriter
from fastpipe.data.records import pack_records


def stored_shape(stored_size, image_size: int, augment: bool) -> Tuple[int, int]:
    """(height, width) to store: ``stored_size`` (int or [h, w]), or auto = image_size, and 8/7 of
    it with augmentation (224 -> 256) so random crops keep detail at ``image_size``."""
    if stored_size is None:
        side = round(image_size * 8 / 7) if augment else image_size
        return side, side
    h, w = (stored_size, stored_size) if isinstance(stored_size, int) else tuple(stored_size)
    return int(h), int(w)


def _ordered_map(fn, items: Iterable, threads: int):
    """``map(fn, items)`` over ``threads`` threads, in order, at most 4 x threads items in flight."""
    if threads <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="fastpipe-pack") as pool:
        pending = deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= 4 * threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def pack_images(name: str, train: ImageFiles, val: ImageFiles, out, shape: Tuple[int, int], threads: int = 1,
                progress: bool = False, chunk_images: int = DEFAULT_CHUNK_IMAGES) -> Path:
    """Decode every image (train then val) resized to ``shape`` into ``out``.

    The resize is the one data=default applies (torchvision Resize, antialiased, on the PIL image),
    so with ``shape == (image_size, image_size)`` the pack holds exactly what data=default feeds.
    """
    files, labels = train.files + val.files, train.labels + val.labels
    split = [TRAIN] * len(train) + [VAL] * len(val)
    resize = transforms.Compose([transforms.Resize(shape, antialias=True), transforms.PILToTensor()])
    images = ImageFiles(files, labels, train.classes, train.image_size, transform=resize)
    meta = {"dataset": name, "root": str(train.root), "stored_size": list(shape),
            "image_size": train.image_size, "train": len(train), "val": len(val)}
    decoded = _ordered_map(lambda i: images[i][0].permute(1, 2, 0).numpy(), range(len(files)), threads)
    if progress:
        from tqdm import tqdm
        decoded = tqdm(decoded, total=len(files), desc=f"packing {Path(out).name}", unit="img",
                       disable=None)  # None: no bar when stderr is not a terminal (logs, tests)
    with PackWriter(out, shape[0], shape[1], train.classes, labels, split, meta, chunk_images) as writer:
        for image in decoded:
            writer.write(image)
    return Path(out)


def images_key(name: str, train: ImageFiles, val: ImageFiles, shape: Tuple[int, int], chunk_images: int) -> str:
    """A hash of what changes an images pack: format, files (paths, sizes, mtimes), labels, split, size."""
    h = hashlib.blake2b(digest_size=8)
    h.update(json.dumps([FORMAT_VERSION, name, str(train.root), train.classes, list(shape), chunk_images,
                         len(train), len(val)]).encode())
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


def _remove_leftovers(path: Path) -> None:
    """Remove every ``.NAME.tmp-PID`` of the pack ``path`` (PackWriter's temporary file). Call under
    the pack's lock: every packer of the cache holds it while writing, so a temporary file seen
    then is a dead writer's."""
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.tmp-*"):
        tmp.unlink(missing_ok=True)


def _clean_after_dead_writers(path: Path) -> None:
    # A reused pack: clean only if there is something to clean and no packer holds the lock now;
    # a read-only cache (packs made by someone else) is fine as it is.
    try:
        if not any(path.parent.glob(f".{glob.escape(path.name)}.tmp-*")):
            return
        with open(path.parent / f".{path.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _remove_leftovers(path)
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
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes; one DDP rank packs
        if path.is_file():  # another process packed it while this one waited
            return path, "packed by another process"
        _remove_leftovers(path)
        return make(path), "packed now"


def ensure_cached_pack(splits, cache_root: Path, shape: Tuple[int, int], threads: int = 1, progress: bool = False,
                       chunk_images: int = DEFAULT_CHUNK_IMAGES) -> Tuple[Path, str]:
    """The cached pack of ``splits`` (a DataSplits) under ``cache_root/packs``; ``shape`` sizes images."""
    folder = Path(cache_root) / "packs"
    if splits.is_images:
        key = images_key(splits.name, splits.train, splits.val, shape, chunk_images)
        return _cached(folder, f"{splits.name}-{shape[0]}x{shape[1]}-{key}.fppack",
                       lambda path: pack_images(splits.name, splits.train, splits.val, path, shape, threads,
                                                progress, chunk_images))
    key = records_key(splits.identity, splits.train, splits.val)
    meta = {"dataset": splits.name, "identity": splits.identity}
    return _cached(folder, f"{splits.name}-records-{key}.fppack",
                   lambda path: pack_records(splits.train, splits.val, path, meta, progress, chunk_images))
