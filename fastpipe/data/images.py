"""Image classification from files: ``ImageFiles`` and the built-in callables ``shapes`` and ``image_folder``.

Every loader knows ``ImageFiles``: data=default decodes its files with PIL in DataLoader workers,
data=mmap packs them once, data=dali reads the files itself. Samples are (uint8 C x H x W, label);
the float conversion and normalisation run on the training device.
"""
from __future__ import annotations

import zlib
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from torch.utils.data import Dataset
from torchvision import transforms
from torchvision.datasets.folder import default_loader

from fastpipe.data import shapes as shapes_generator
from fastpipe.errors import ConfigError, DataError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")


def image_transform(image_size: int, augment: bool):
    """The host-side transform of data=default and the pack: resize (or random crop) to uint8."""
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

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int):
        path = self.files[index]
        try:
            image = default_loader(path)
        except Exception as exc:  # name the file: "cannot identify image" alone is no help
            raise DataError(f"cannot read image {path}: {exc}; remove or replace the file") from exc
        return self.transform(image), self.labels[index]


def _scan(folder: Path, classes: Optional[List[str]] = None) -> Tuple[List[str], List[str], List[int]]:
    if classes is None:
        classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    files, labels = [], []
    for label, name in enumerate(classes):
        class_dir = folder / name
        if not class_dir.is_dir():
            continue
        found = sorted(str(p) for p in class_dir.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS)
        files += found
        labels += [label] * len(found)
    return classes, files, labels


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
        classes, tr_files, tr_labels = _scan(root / "train")
        _, va_files, va_labels = _scan(root / "val", classes)
    else:
        classes, files, labels = _scan(root)
        held = [_is_held_out(f, root, val_fraction) for f in files]
        tr_files = [f for f, h in zip(files, held) if not h]
        tr_labels = [lab for lab, h in zip(labels, held) if not h]
        va_files = [f for f, h in zip(files, held) if h]
        va_labels = [lab for lab, h in zip(labels, held) if h]
    if not classes or not tr_files:
        raise DataError(f"dataset folder {root} holds no images; expected {root}/<class>/<image>.jpg|png "
                        "(one sub-folder per class)")
    if len(classes) < 2:
        raise DataError(f"dataset folder {root} has one class ({classes[0]}); classification needs >= 2 "
                        "sub-folders")
    if not va_files:
        raise DataError(f"dataset folder {root} is too small for a held-out split; add images or raise "
                        "dataset.val_fraction")
    return classes, tr_files, tr_labels, va_files, va_labels


def _splits(root: Path, image_size: int, augment: bool, val_fraction: float) -> dict:
    classes, tr_f, tr_l, va_f, va_l = scan_image_folder(root, val_fraction)
    return {"train": ImageFiles(tr_f, tr_l, classes, image_size, augment, root),
            "val": ImageFiles(va_f, va_l, classes, image_size, False, root)}


def _check_image_size(params: dict) -> None:
    if params.get("image_size", 32) < 8:
        raise ConfigError(f"dataset.image_size={params['image_size']} is too small; use >= 8")


def image_folder(root: Optional[str] = None, image_size: int = 224, augment: bool = True,
                 val_fraction: float = 0.2) -> dict:
    """Your images: ``root/<class>/<image>.jpg|png``; a ``root/train`` + ``root/val`` pair is used as the
    two splits, otherwise a deterministic ``val_fraction`` of the files (by a hash of each path) is held out.
    ``augment``: random-resized-crop + horizontal flip on the training split."""
    return _splits(Path(root).expanduser(), image_size, augment, val_fraction)


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
    shapes_generator.generate(folder, num_classes, num_images, size, seed, progress=progress, threads=cpu_threads)
    return _splits(folder, image_size, augment, val_fraction)


def _check_shapes(params: dict) -> None:
    _check_image_size(params)
    size = params.get("source_size")
    if size is not None and (len(size) != 2 or min(size) < 8):
        raise ConfigError(f"dataset.source_size={size}: use [width, height], each >= 8")


# Declarations fastpipe reads from the config alone, before building anything (docs/project.md).
for _fn, _check in ((image_folder, _check_image_folder), (shapes, _check_shapes)):
    _fn.sample_kind = "images"
    _fn.loaders = ("default", "mmap", "dali")
    _fn.check_config = _check
