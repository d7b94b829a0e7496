"""The built-in ``shapes`` dataset: coloured shapes on noise, one class per shape, as JPEG files.

Every image is drawn from its own seeded generator, so the same settings always give byte-identical
files (for the same Pillow build). Generation is written atomically, with a manifest (the settings
and each class's file count) checked whenever the folder is opened: a folder found incomplete (a
class or files deleted) is regenerated, never trained on.
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Optional, Tuple

import numpy as np
from PIL import Image, ImageDraw

from fastpipe import signals
from fastpipe.data.cachedir import remove_dead_tmp, tmp_sibling, writing_into
from fastpipe.errors import ConfigError, DataError
from fastpipe.files import file_lock

SHAPES = ("circle", "square", "triangle", "cross", "ring", "diamond", "hbar", "vbar")
GENERATOR_VERSION = 2  # bump when drawing changes, so cached folders are not reused


def _polygon(kind: str, cx: float, cy: float, r: float):
    if kind == "triangle":
        return [(cx, cy - r), (cx - r, cy + r * 0.8), (cx + r, cy + r * 0.8)]
    if kind == "diamond":
        return [(cx, cy - r), (cx + r * 0.8, cy), (cx, cy + r), (cx - r * 0.8, cy)]
    raise ValueError(kind)


def draw_shape(kind: str, size: Tuple[int, int], rng: np.random.Generator) -> Image.Image:
    """One image of ``kind`` on a noisy background, with random position, size and colours."""
    w, h = size
    # Colours are random (they carry no class information) but the shape is always clearly brighter
    # or darker than its background in every channel, so the class is the shape's outline alone.
    dark = rng.integers(0, 96, 3)
    light = rng.integers(160, 256, 3)
    background, colour = (dark, light) if rng.random() < 0.5 else (light, dark)
    noise = rng.normal(0, 18, (h, w, 3))
    pixels = np.clip(background + noise, 0, 255).astype(np.uint8)
    image = Image.fromarray(pixels, "RGB")
    draw = ImageDraw.Draw(image)
    colour = tuple(int(c) for c in colour)
    side = min(w, h)
    r = side * rng.uniform(0.18, 0.32)
    cx = rng.uniform(r + 1, w - r - 1)
    cy = rng.uniform(r + 1, h - r - 1)
    box = (cx - r, cy - r, cx + r, cy + r)
    thick = max(1, int(r * 0.35))
    if kind == "circle":
        draw.ellipse(box, fill=colour)
    elif kind == "ring":
        draw.ellipse(box, outline=colour, width=thick)
    elif kind == "square":
        draw.rectangle(box, fill=colour)
    elif kind in ("triangle", "diamond"):
        draw.polygon(_polygon(kind, cx, cy, r), fill=colour)
    elif kind == "cross":
        draw.rectangle((cx - r, cy - thick / 2, cx + r, cy + thick / 2), fill=colour)
        draw.rectangle((cx - thick / 2, cy - r, cx + thick / 2, cy + r), fill=colour)
    elif kind == "hbar":
        draw.rectangle((cx - r, cy - thick / 2, cx + r, cy + thick / 2), fill=colour)
    elif kind == "vbar":
        draw.rectangle((cx - thick / 2, cy - r, cx + thick / 2, cy + r), fill=colour)
    return image


def settings_key(num_classes: int, num_images: int, size: Tuple[int, int], seed: int) -> str:
    """A short hash of everything that changes the generated files."""
    blob = json.dumps([GENERATOR_VERSION, num_classes, num_images, list(size), seed])
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def _write_one(tmp: Path, classes: Tuple[str, ...], size: Tuple[int, int], seed: int, index: int) -> None:
    kind = classes[index % len(classes)]
    draw_shape(kind, size, np.random.default_rng([seed, index])).save(tmp / kind / f"{index:07d}.jpg", quality=90)


MANIFEST = "manifest.json"


def manifest(num_classes: int, num_images: int, size: Tuple[int, int], seed: int) -> dict:
    """What a complete folder holds: the settings and each class's number of files."""
    classes = SHAPES[:num_classes]
    return {"generator": GENERATOR_VERSION, "num_classes": num_classes, "num_images": num_images,
            "size": list(size), "seed": seed,
            "files": {name: len(range(i, num_images, num_classes)) for i, name in enumerate(classes)}}


def incomplete(root: Path, expected: dict) -> Optional[str]:
    """Why ``root`` is not the complete folder ``expected`` describes, or None. Counting the files
    costs one directory listing per class: cheap enough to do on every open."""
    try:
        found = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return f"its {MANIFEST} is missing or unreadable"
    if found != expected:
        return f"its {MANIFEST} describes other settings"
    for name, count in expected["files"].items():
        if not (root / name).is_dir():
            return f"class folder {name}/ is missing"
        have = sum(1 for e in os.scandir(root / name) if e.name.endswith(".jpg"))
        if have != count:
            return f"class folder {name}/ holds {have} of its {count} images"
    extra = sorted((set(SHAPES) - set(expected["files"])) & {e.name for e in os.scandir(root)})
    return f"it holds a folder {extra[0]}/ that is not one of its classes" if extra else None


def _refuse_foreign(root: Path) -> None:
    # Regenerating deletes the folder: never a folder holding anything the generator did not write.
    foreign = sorted(e.name for e in os.scandir(root) if e.name != MANIFEST and not (e.name in SHAPES and e.is_dir()))
    if foreign:
        raise DataError(f"{root} holds {foreign[0]!r}, which the shapes generator did not write, so it cannot be "
                        "regenerated there; give dataset.root a new or empty folder (your own images: dataset=imagefolder)")


def _write(tmp: Path, expected: dict, size: Tuple[int, int], seed: int, progress: bool, threads: int, desc: str) -> None:
    shutil.rmtree(tmp, ignore_errors=True)
    classes = tuple(expected["files"])
    for name in classes:
        (tmp / name).mkdir(parents=True)
    write = partial(_write_one, tmp, classes, tuple(size), seed)
    count = expected["num_images"]
    with _pool(threads, count) as pool:
        done = pool(write, range(count))
        if progress:
            from tqdm import tqdm
            done = tqdm(done, total=count, desc=desc, leave=False)
        for _ in done:  # also raises the first error of any image
            signals.check()  # a stop signal, held back while the pool works
    (tmp / MANIFEST).write_text(json.dumps(expected, indent=1))  # inside the folder before the rename


PROCESSES_FROM = 2048  # images: a set this large is drawn by processes (numpy's noise holds the GIL)


@contextmanager
def _pool(threads: int, count: int):
    """An unordered map over ``threads`` workers: forked processes for large sets, threads otherwise."""
    if threads > 1 and count >= PROCESSES_FROM and "fork" in multiprocessing.get_all_start_methods():
        # a stop signal raises between images (signals.check), never inside the pool's fork or locks
        from fastpipe.processes import fork_pool

        with signals.deferred(), fork_pool(threads) as pool:
            yield lambda fn, items: signals.pool_results(pool.imap_unordered(fn, items))
        return
    with ThreadPoolExecutor(max(1, threads), thread_name_prefix="fastpipe-shapes") as pool:
        yield pool.map


def _old(root: Path) -> Path:
    return root.with_name(root.name + ".old")  # its temporary siblings hold incomplete copies being dropped


def _install(tmp: Path, root: Path, replace: bool = False) -> None:
    """Rename ``tmp`` to ``root``, atomic: the folder appears complete or not at all. ``replace``
    (under the lock only): move the incomplete ``root`` aside first, then drop it."""
    stale = tmp_sibling(_old(root))
    if replace and root.is_dir():
        os.rename(root, stale)
    try:
        os.rename(tmp, root)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process finished first
        if not root.is_dir():
            raise
    shutil.rmtree(stale, ignore_errors=True)


def generate(root: Path, num_classes: int, num_images: int, size: Tuple[int, int], seed: int,
             progress: bool = False, threads: int = 1, fix: str = "give a writable folder") -> Path:
    """Write the dataset as ``root/<class>/<index>.jpg`` (and ``root/manifest.json``) unless it is
    already there, complete; an incomplete folder is regenerated, with a warning on stderr.

    ``threads`` images are drawn and encoded at once, by threads, or by forked processes for sets of
    ``PROCESSES_FROM`` images or more (numpy's random noise holds the GIL); each image has its own
    seed, so the files are the same for any number of workers. ``fix`` ends the message when the
    folder cannot be written.
    """
    if not 2 <= num_classes <= len(SHAPES):
        raise ConfigError(f"dataset.num_classes={num_classes}: the shapes dataset has 2..{len(SHAPES)} classes")
    if num_images < 2 * num_classes:
        raise ConfigError(f"dataset.num_images={num_images} is too few for {num_classes} classes")
    expected = manifest(num_classes, num_images, size, seed)
    remove_dead_tmp(root)
    remove_dead_tmp(_old(root))
    problem = incomplete(root, expected) if root.is_dir() else None
    if root.is_dir() and problem is None:
        return root
    desc = f"generating shapes dataset in {root}"
    with writing_into(root.parent, fix):
        if problem is None:  # a new folder: no lock (the first rename wins, as before)
            root.parent.mkdir(parents=True, exist_ok=True)
            tmp = tmp_sibling(root)
            _write(tmp, expected, size, seed, progress, threads, desc)
            _install(tmp, root)
            return root
        _refuse_foreign(root)
        print(f"fastpipe: warning: the shapes dataset in {root} is incomplete ({problem}); generating it again",
              file=sys.stderr, flush=True)
        # one process regenerates; the others then find it complete
        with file_lock(root.parent / f".{root.name}.lock"):
            if incomplete(root, expected) is not None:
                tmp = tmp_sibling(root)
                _write(tmp, expected, size, seed, progress, threads, desc)
                _install(tmp, root, replace=True)
    return root
