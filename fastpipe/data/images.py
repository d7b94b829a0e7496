"""Image classification from files: ``ImageFiles`` and the built-in callables ``shapes`` and ``image_folder``.

Every loader knows ``ImageFiles``: data=default decodes its files with PIL in DataLoader workers,
data=mmap packs them once, data=dali reads the files itself. Samples are (uint8 C x H x W, label);
the float conversion and normalisation run on the training device.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

from fastpipe.data import shapes as shapes_generator
from fastpipe.data.cachedir import CACHE_FIX
from fastpipe.data.cachedir import files_key, run_once
from fastpipe.data.folders import check_headers, scan_image_folder
from fastpipe.errors import ConfigError, DataError, FastpipeError

HIGH_BIT_MODES = ("I;16", "I;16B", "I;16L", "I", "F")  # PIL's convert("RGB") clips these to 0..255


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
    # only resolves the dataset's _target_ (a sweep's checks of its jobs) never needs.
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
