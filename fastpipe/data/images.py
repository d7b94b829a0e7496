"""Image classification from files: ``ImageFiles`` and the built-in callables ``shapes`` and ``image_folder``.

Every loader knows ``ImageFiles``: data=default decodes its files with PIL in DataLoader workers,
data=mmap packs them once, data=dali reads the files itself. Samples are (uint8 C x H x W, label);
the float conversion and normalisation run on the training device.
"""
from __future__ import annotations

import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

from fastpipe.data import shapes as shapes_generator
from fastpipe.data.cachedir import CACHE_FIX
from fastpipe.data.checked import files_key, run_once
from fastpipe.errors import ConfigError, DataError, FastpipeError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
HIGH_BIT_MODES = ("I;16", "I;16B", "I;16L", "I", "F")  # PIL's convert("RGB") clips these to 0..255
HEADER_CHECK_THREADS = 8  # on network storage opening a file is mostly waiting: more threads than cores
HEADER_CHECK_CHUNK = 256  # files per task: one future per file would cost more than the check
PROGRESS_FROM = 20_000  # files: a header check this long is worth a progress bar


def _to_8bit(image: Image.Image) -> Image.Image:
    """A 16-bit, 32-bit integer or float grayscale image as 8-bit "L": integers scaled from their bit
    depth (16-bit: /257, 65535 -> 255; an "I" image whose values all fit 0..65535 is 16-bit, larger
    values scale by 2**32 - 1), floats taken as 0..1 and clipped."""
    values = np.asarray(image)
    if image.mode == "F":
        scaled = np.clip(np.nan_to_num(values, nan=0.0), 0.0, 1.0) * 255.0
    else:
        full = 65535 if values.max(initial=0) <= 65535 else 2**32 - 1
        scaled = np.clip(values.astype(np.float64), 0, None) / (full // 255)  # 257 or 16843009: exact
    return Image.fromarray(np.rint(scaled).astype(np.uint8), "L")


def decode_rgb(path: str) -> Image.Image:
    """The image at ``path`` as 8-bit RGB, the one decode of data=default and the pack writer:
    high-bit-depth modes scaled (``_to_8bit``), grayscale repeated into the three channels."""
    with open(path, "rb") as f:
        image = Image.open(f)
        if image.mode in HIGH_BIT_MODES:
            image = _to_8bit(image)
        return image.convert("RGB")


def image_transform(image_size: int, augment: bool):
    """The host-side transform of data=default and the pack: resize (or random crop) to uint8."""
    # Imported here: torchvision's package import pulls in torch._dynamo (about 1 s), which a process that
    # only resolves the dataset's _target_ (the Hydra process of a fresh-process run, a sweep's checks) never needs.
    from torchvision import transforms

    if augment:
        geometry = [transforms.RandomResizedCrop(image_size, antialias=True), transforms.RandomHorizontalFlip()]
    else:
        geometry = [transforms.Resize((image_size, image_size), antialias=True)]
    return transforms.Compose(geometry + [transforms.PILToTensor()])


class ImageFiles(Dataset):
    """Image files with integer labels: ``[i]`` -> (uint8 3 x S x S tensor, label)."""

    def __init__(self, files: Sequence[str], labels: Sequence[int], classes: Sequence[str], image_size: int,
                 augment: bool = False, root: Optional[Path] = None, transform=None) -> None:
        self.files, self.labels, self.classes = list(files), [int(x) for x in labels], list(classes)
        self.image_size, self.augment, self.root = image_size, augment, root
        self.transform = transform or image_transform(image_size, augment)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def targets(self) -> List[int]:
        """Each sample's class index (torchvision's name for them): a held-out subset is balanced on them."""
        return self.labels

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int):
        path = self.files[index]
        try:
            image = decode_rgb(path)
        except FastpipeError:  # a stop signal (Preempted) that landed here: the file is fine
            raise
        except Exception as exc:  # name the file: "cannot identify image" alone is no help
            raise DataError(f"cannot read image {path}: {exc}; remove or replace the file") from exc
        return self.transform(image), self.labels[index]


def _images_under(class_dir: Path) -> List[str]:
    """Image files under ``class_dir``, symlinked sub-folders followed as torchvision's ImageFolder
    does (os.walk(followlinks=True)), each real folder once (a symlink loop ends there); sorted."""
    found, seen = [], set()
    for folder, subfolders, names in os.walk(class_dir, followlinks=True):
        subfolders.sort()  # walk in a fixed order, so the path kept for a folder reached twice is too
        real = os.path.realpath(folder)
        if real in seen:
            subfolders.clear()
            continue
        seen.add(real)
        found += [os.path.join(folder, n) for n in names if n.lower().endswith(IMAGE_EXTENSIONS)]
    return sorted(found)


def _scan(folder: Path, classes: Optional[List[str]] = None) -> Tuple[List[str], List[str], List[int], List[str]]:
    """(classes, files, labels, classes whose folder holds no image): ``classes`` from the folder's
    sub-folders unless given (a val/ folder reads train/'s; a class it lacks is skipped)."""
    if classes is None:
        classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    files, labels, empty = [], [], []
    for label, name in enumerate(classes):
        class_dir = folder / name
        if not class_dir.is_dir():
            continue
        found = _images_under(class_dir)
        if not found:
            empty.append(name)
        files += found
        labels += [label] * len(found)
    return classes, files, labels, empty


def _refuse_empty_class(folder: Path, empty: List[str]) -> None:
    # A class without images would still be an output of the model, one it can never learn.
    if empty:
        more = f" (as do {len(empty) - 1} more: {', '.join(empty[1:4])})" if len(empty) > 1 else ""
        raise DataError(f"class folder {folder / empty[0]} holds no images ({', '.join(IMAGE_EXTENSIONS)}){more}; "
                        "add images or remove the folder")


def _is_held_out(path: str, root: Path, fraction: float) -> bool:
    # Hash of the relative path: stable across machines and when files are added.
    rel = str(Path(path).relative_to(root)).encode()
    return zlib.crc32(rel) % 10_000 < fraction * 10_000


def scan_image_folder(root: Path, val_fraction: float) -> Tuple[List[str], list, list, list, list]:
    """Classes and the two splits of an ImageFolder (``root/train`` + ``root/val`` when present)."""
    if not root.is_dir():
        raise DataError(f"dataset folder {root} does not exist; set dataset.root to a folder with one "
                        "sub-folder of images per class")
    if (root / "train").is_dir() and (root / "val").is_dir():
        classes, tr_files, tr_labels, empty = _scan(root / "train")
        extra = sorted(p.name for p in (root / "val").iterdir() if p.is_dir() and p.name not in classes)
        if extra:  # its images would otherwise be dropped without a word
            raise DataError(f"class {extra[0]!r} is in {root / 'val'} but not in {root / 'train'} (the classes come "
                            f"from train/); add {root / 'train' / extra[0]} or remove {root / 'val' / extra[0]}")
        _, va_files, va_labels, va_empty = _scan(root / "val", classes)
        empty_in = root / "train" if empty else root / "val"
        empty = empty or va_empty
    else:
        classes, files, labels, empty = _scan(root)
        empty_in = root
        held = [_is_held_out(f, root, val_fraction) for f in files]
        tr_files = [f for f, h in zip(files, held) if not h]
        tr_labels = [lab for lab, h in zip(labels, held) if not h]
        va_files = [f for f, h in zip(files, held) if h]
        va_labels = [lab for lab, h in zip(labels, held) if h]
    if not classes or not tr_files:
        raise DataError(f"dataset folder {root} holds no images; expected {root}/<class>/<image>.jpg|png "
                        "(one sub-folder per class)")
    _refuse_empty_class(empty_in, empty)
    if len(classes) < 2:
        raise DataError(f"dataset folder {root} has one class ({classes[0]}); classification needs >= 2 "
                        "sub-folders")
    if not va_files:
        raise DataError(f"dataset folder {root} is too small for a held-out split; add images or raise "
                        "dataset.val_fraction")
    return classes, tr_files, tr_labels, va_files, va_labels


def _header_problems(paths: Sequence[str]) -> List[Optional[str]]:
    """Why each file's header cannot be read (None: it can): PIL.Image.open reads only the header."""
    problems = []
    for path in paths:
        try:
            with Image.open(path):
                problems.append(None)
        except Exception as exc:  # any failure here is one data=default would meet later
            problems.append(str(exc) or type(exc).__name__)
    return problems


def check_headers(files: Sequence[str], progress: bool = False) -> None:
    """Open every file's header before training (a bad held-out file would otherwise end the run
    after a whole epoch): one DataError naming the first unreadable file and how many there are.
    A file whose header is fine but whose data is corrupt still fails at its batch."""
    chunks = [files[i:i + HEADER_CHECK_CHUNK] for i in range(0, len(files), HEADER_CHECK_CHUNK)]
    with ThreadPoolExecutor(HEADER_CHECK_THREADS, thread_name_prefix="fastpipe-headers") as pool:
        done = pool.map(_header_problems, chunks)  # in order: the first bad file is the first listed
        if progress and len(files) >= PROGRESS_FROM:
            from tqdm import tqdm
            done = tqdm(done, total=len(chunks), desc=f"checking {len(files)} image headers", unit="chunk",
                        leave=False, disable=None)
        problems = [why for chunk in done for why in chunk]
    bad = [(path, why) for path, why in zip(files, problems) if why is not None]
    if bad:
        count = f" ({len(bad)} of the {len(files)} image files cannot be read; this is the first)" if len(bad) > 1 else ""
        raise DataError(f"cannot read image {bad[0][0]}: {bad[0][1]}; remove or replace the file{count}")


def _splits(root: Path, image_size: int, augment: bool, val_fraction: float, progress: bool = False,
            cache_root: Optional[Path] = None) -> dict:
    classes, tr_f, tr_l, va_f, va_l = scan_image_folder(root, val_fraction)
    files = tr_f + va_f  # their headers checked once per version of the folder, not before every run
    run_once(cache_root, files_key("headers", files), lambda: check_headers(files, progress))
    return {"train": ImageFiles(tr_f, tr_l, classes, image_size, augment, root),
            "val": ImageFiles(va_f, va_l, classes, image_size, False, root)}


def _check_image_size(params: dict) -> None:
    if params.get("image_size", 32) < 8:
        raise ConfigError(f"dataset.image_size={params['image_size']} is too small; use >= 8")


def image_folder(root: Optional[str] = None, image_size: int = 224, augment: bool = True,
                 val_fraction: float = 0.2, progress: bool = False, cache_root: Optional[Path] = None) -> dict:
    """Your images: ``root/<class>/<image>.jpg|png``; a ``root/train`` + ``root/val`` pair is used as the
    two splits, otherwise a deterministic ``val_fraction`` of the files (by a hash of each path) is held out.
    ``augment``: random-resized-crop + horizontal flip on the training split."""
    return _splits(Path(root).expanduser(), image_size, augment, val_fraction, progress, cache_root)


def _check_image_folder(params: dict) -> None:
    if not params.get("root"):
        raise ConfigError("dataset=imagefolder needs a folder: add dataset.root=/path/to/images "
                          "(one sub-folder per class)")
    _check_image_size(params)


def shapes(num_classes: int = 4, num_images: int = 2400, image_size: int = 32, augment: bool = False,
           seed: int = 0, source_size: Optional[List[int]] = None, root: Optional[str] = None,
           val_fraction: float = 0.2, cache_root: Optional[Path] = None, cpu_threads: int = 1,
           progress: bool = False) -> dict:
    """The built-in, learnable dataset: coloured shapes on noise, one class per shape (2-8 classes),
    written once as JPEG files (``source_size`` [width, height], default image_size square) into
    ``root`` or the cache; the same settings always give byte-identical files."""
    size = tuple(source_size) if source_size else (image_size, image_size)
    if root:
        folder = Path(root).expanduser()
    else:
        if cache_root is None:
            raise ConfigError("dataset=shapes needs a folder: set dataset.root, or run through fastpipe (which "
                              "passes its cache folder)")
        folder = Path(cache_root) / ("shapes-" + shapes_generator.settings_key(num_classes, num_images, size, seed))
    fix = "set dataset.root to a writable folder" if root else CACHE_FIX
    shapes_generator.generate(folder, num_classes, num_images, size, seed, progress, cpu_threads, fix)
    return _splits(folder, image_size, augment, val_fraction, progress, cache_root)


def _check_shapes(params: dict) -> None:
    _check_image_size(params)
    size = params.get("source_size")
    if size is not None and (len(size) != 2 or min(size) < 8):
        raise ConfigError(f"dataset.source_size={size}: use [width, height], each >= 8")


# Declarations fastpipe reads from the config alone, before building anything (docs/project.md).
for _fn, _check in ((image_folder, _check_image_folder), (shapes, _check_shapes)):
    _fn.sample_kind = "images"
    _fn.data_format = "image_files"  # which loaders read it: config/registry.py
    _fn.check_config = _check
