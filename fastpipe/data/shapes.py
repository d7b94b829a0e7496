"""The built-in ``shapes`` dataset: coloured shapes on noise, one class per shape, as JPEG files.

Every image is drawn from its own seeded generator, so the same settings always give byte-identical
files (for the same Pillow build), and generation is written atomically: a folder that exists is
complete.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Tuple

import numpy as np
from PIL import Image, ImageDraw

from fastpipe.errors import ConfigError

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


def generate(root: Path, num_classes: int, num_images: int, size: Tuple[int, int], seed: int,
             progress: bool = False, threads: int = 1) -> Path:
    """Write the dataset as ``root/<class>/<index>.jpg`` unless it is already there.

    ``threads`` images are drawn and encoded at once (numpy and Pillow release the GIL for most of
    the work, and ImageNet-sized images are slow to encode on one core); each image has its own
    seed, so the files are the same for any number of threads.
    """
    if not 2 <= num_classes <= len(SHAPES):
        raise ConfigError(f"dataset.num_classes={num_classes}: the shapes dataset has 2..{len(SHAPES)} classes")
    if num_images < 2 * num_classes:
        raise ConfigError(f"dataset.num_images={num_images} is too few for {num_classes} classes")
    if root.is_dir():
        return root
    tmp = root.with_name(f"{root.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    classes = SHAPES[:num_classes]
    for name in classes:
        (tmp / name).mkdir(parents=True)
    write = partial(_write_one, tmp, classes, tuple(size), seed)
    with ThreadPoolExecutor(max(1, threads), thread_name_prefix="fastpipe-shapes") as pool:
        done = pool.map(write, range(num_images))
        if progress:
            from tqdm import tqdm
            done = tqdm(done, total=num_images, desc=f"generating shapes dataset in {root}", unit="img", leave=False)
        for _ in done:  # also raises the first error of any image
            pass
    try:
        os.rename(tmp, root)  # atomic: the folder appears complete or not at all
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process finished first
        if not root.is_dir():
            raise
    return root
