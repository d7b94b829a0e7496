"""Resolve the ``dataset`` group into a DatasetSpec: file lists, labels and the held-out split."""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

from fastpipe.data import shapes
from fastpipe.errors import DataError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")


@dataclass
class DatasetSpec:
    """What every loader needs: the files and labels of each split (none for synthetic)."""

    name: str
    classes: List[str]
    image_size: int
    augment: bool
    root: Optional[Path] = None
    train_files: List[str] = field(default_factory=list)
    train_labels: List[int] = field(default_factory=list)
    val_files: List[str] = field(default_factory=list)
    val_labels: List[int] = field(default_factory=list)
    synthetic_samples: int = 0

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def is_synthetic(self) -> bool:
        return self.name == "synthetic"

    def describe(self) -> str:
        if self.is_synthetic:
            return (f"synthetic  classes={self.num_classes}  samples/epoch={self.synthetic_samples}  "
                    f"image_size={self.image_size}")
        return (f"{self.name}  root={self.root}  classes={self.num_classes}  train={len(self.train_files)}  "
                f"val={len(self.val_files)}  image_size={self.image_size}  augment={self.augment}")


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


def resolve_dataset(cfg, cache_root: Path, progress: bool = False, threads: int = 1) -> DatasetSpec:
    """Build the DatasetSpec for ``cfg`` (a DatasetConfig), generating ``shapes`` on first use."""
    if cfg.name == "synthetic":
        classes = [str(i) for i in range(cfg.num_classes)]
        return DatasetSpec("synthetic", classes, cfg.image_size, False, synthetic_samples=cfg.num_images)
    if cfg.name == "shapes":
        size = tuple(cfg.source_size) if cfg.source_size else (cfg.image_size, cfg.image_size)
        root = Path(cfg.root) if cfg.root else cache_root / (
            "shapes-" + shapes.settings_key(cfg.num_classes, cfg.num_images, size, cfg.seed))
        shapes.generate(root, cfg.num_classes, cfg.num_images, size, cfg.seed, progress=progress, threads=threads)
    else:
        root = Path(cfg.root).expanduser()
    classes, tr_f, tr_l, va_f, va_l = scan_image_folder(root, cfg.val_fraction)
    return DatasetSpec(cfg.name, classes, cfg.image_size, cfg.augment, root, tr_f, tr_l, va_f, va_l)
