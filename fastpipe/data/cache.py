"""The pack cache: each dataset decoded once into a pack under ``<cache>/packs``, keyed by what changes it.

``ensure_cached_pack`` is what ``data=mmap`` calls when no ``data.path`` is given; ``pack_spec``
also serves ``python -m fastpipe.pack``. The format itself is in packfile.py.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable, Tuple

from fastpipe.data.packfile import (
    DEFAULT_CHUNK_IMAGES,
    FORMAT_VERSION,
    TRAIN,
    VAL,
    PackWriter,
)
from fastpipe.errors import ConfigError


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


def pack_spec(spec, out, shape: Tuple[int, int], threads: int = 1, progress: bool = False,
              chunk_images: int = DEFAULT_CHUNK_IMAGES) -> Path:
    """Decode every image of ``spec`` (a DatasetSpec, train then val) resized to ``shape`` into ``out``.

    The resize is the one data=default applies (torchvision Resize, antialiased, on the PIL image),
    so with ``shape == (image_size, image_size)`` the pack holds exactly what data=default feeds.
    """
    from torchvision import transforms

    from fastpipe.data.default import (
        ImageFiles,  # decodes with PIL; names an unreadable file
    )

    if spec.is_synthetic:
        raise ConfigError("dataset=synthetic is generated on the device and has no images to pack; "
                          "use dataset=shapes or dataset=imagefolder")
    files = spec.train_files + spec.val_files
    split = [TRAIN] * len(spec.train_files) + [VAL] * len(spec.val_files)
    labels = list(spec.train_labels) + list(spec.val_labels)
    images = ImageFiles(files, labels, transforms.Compose([transforms.Resize(shape, antialias=True),
                                                           transforms.PILToTensor()]))
    meta = {"dataset": spec.name, "root": str(spec.root), "stored_size": list(shape),
            "image_size": spec.image_size, "train": len(spec.train_files), "val": len(spec.val_files)}
    decoded = _ordered_map(lambda i: images[i][0].permute(1, 2, 0).numpy(), range(len(files)), threads)
    if progress:
        from tqdm import tqdm
        decoded = tqdm(decoded, total=len(files), desc=f"packing {Path(out).name}", unit="img",
                       disable=None)  # None: no bar when stderr is not a terminal (logs, tests)
    with PackWriter(out, shape[0], shape[1], spec.classes, labels, split, meta, chunk_images) as writer:
        for image in decoded:
            writer.write(image)
    return Path(out)


def cache_key(spec, shape: Tuple[int, int], chunk_images: int) -> str:
    """A hash of what changes a pack: format, dataset files (paths, sizes, mtimes), labels, split, size."""
    h = hashlib.blake2b(digest_size=8)
    h.update(json.dumps([FORMAT_VERSION, spec.name, str(spec.root), spec.classes, list(shape),
                         chunk_images, len(spec.train_files), len(spec.val_files)]).encode())
    for split, files, labels in ((TRAIN, spec.train_files, spec.train_labels), (VAL, spec.val_files, spec.val_labels)):
        for path, label in zip(files, labels):
            st = os.stat(path)  # an edited or replaced file gives a new pack
            h.update(f"{split}\0{label}\0{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def ensure_cached_pack(spec, cache_root: Path, shape: Tuple[int, int], threads: int = 1, progress: bool = False,
                       chunk_images: int = DEFAULT_CHUNK_IMAGES) -> Tuple[Path, str]:
    """The cached pack of ``spec`` at ``shape`` under ``cache_root/packs``: (path, how it was found:
    "reused", "packed now", or "packed by another process" that held the lock).

    A file lock lets one process (e.g. one DDP rank) pack while the others wait, then reuse it.
    """
    import fcntl

    folder = Path(cache_root) / "packs"
    path = folder / f"{spec.name}-{shape[0]}x{shape[1]}-{cache_key(spec, shape, chunk_images)}.fppack"
    if path.is_file():
        return path, "reused"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if path.is_file():  # another process packed it while this one waited
            return path, "packed by another process"
        return pack_spec(spec, path, shape, threads, progress, chunk_images), "packed now"
