"""A folder of images by class (torchvision ImageFolder's layout): its classes, its two splits (a
``train/`` + ``val/`` pair, or a held-out fraction chosen by a hash of each path) and a check of every
file's header before training."""
from __future__ import annotations

import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from PIL import Image

from fastpipe.errors import DataError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
HEADER_CHECK_THREADS = 8  # on network storage opening a file is mostly waiting: more threads than cores
HEADER_CHECK_CHUNK = 256  # files per task: one future per file would cost more than the check
PROGRESS_FROM = 20_000  # files: a header check this long is worth a progress bar


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


def _held_out(files: Sequence[str], root: Path, fraction: float) -> List[bool]:
    """Whether each file is held out: a hash of its path relative to ``root``, stable across machines and
    when files are added. The files were listed under ``str(root)`` (``_images_under``), so the relative
    path is the text after that prefix: as ``Path.relative_to`` gives it, at a fraction of its cost for a
    folder of a million files."""
    start, cut = len(os.path.join(str(root), "")), fraction * 10_000
    return [zlib.crc32(path[start:].encode()) % 10_000 < cut for path in files]


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
        held = _held_out(files, root, val_fraction)
        tr_files = [f for f, h in zip(files, held) if not h]
        tr_labels = [lab for lab, h in zip(labels, held) if not h]
        va_files = [f for f, h in zip(files, held) if h]
        va_labels = [lab for lab, h in zip(labels, held) if h]
    if tr_files or va_files:  # some images: an empty class folder is the problem to name (a/ 1 image, b/ none)
        _refuse_empty_class(empty_in, empty)
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
