"""``python -m fastpipe.pack``: decode a dataset once into a pack that ``data=mmap`` memory-maps.

    python -m fastpipe.pack /data/imagenet-folder imagenet.fppack --size 256
    python -m fastpipe.pack shapes shapes.fppack dataset.num_images=4096 dataset.source_size=[500,375]
    python -m fastpipe.pack --verify imagenet.fppack

SRC is an ImageFolder (same class/split rules as ``dataset=imagefolder``) or a built-in dataset by
name (``shapes``), composed from conf/dataset exactly as a training run composes it; ``dataset.KEY=
VALUE`` arguments change its settings. The format is documented in fastpipe/data/packfile.py.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable, Optional, Tuple

from fastpipe.data.packfile import DEFAULT_CHUNK_IMAGES, FORMAT_VERSION, TRAIN, VAL, PackReader, PackWriter
from fastpipe.errors import EXIT_CODE, ConfigError, DataError, FastpipeError


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

    from fastpipe.data.default import ImageFiles  # decodes with PIL; names an unreadable file

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


def resolve_source(src: str, overrides: list, cache_root: Path, progress: bool):
    """SRC (a folder, or a conf/dataset name) + ``dataset.KEY=VALUE`` overrides -> a DatasetSpec."""
    from hydra import compose, initialize_config_dir

    from fastpipe.__main__ import config_dir  # also registers the schemas
    from fastpipe.config import to_settings
    from fastpipe.data.datasets import resolve_dataset

    bad = [o for o in overrides if not o.startswith("dataset.")]
    if bad:
        raise ConfigError(f"{bad[0]!r}: only dataset.KEY=VALUE settings can follow SRC OUT")
    folder = Path(src).expanduser()
    builtin = (Path(config_dir()) / "dataset" / f"{src}.yaml").is_file() and src != "imagefolder"
    if not folder.is_dir() and not builtin:
        raise DataError(f"{src} is neither a folder of images nor a built-in dataset (shapes); give an "
                        "ImageFolder path (one sub-folder per class) or a dataset name")
    try:
        with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
            cfg = compose("config", overrides=[f"dataset={src if builtin else 'imagefolder'}"] + overrides)
    except Exception as exc:  # Hydra's own message names the bad override; its cause says why
        why = f" ({str(exc.__cause__).splitlines()[0]})" if exc.__cause__ else ""
        raise ConfigError(str(exc).splitlines()[0] + why) from exc
    if not builtin:
        cfg.dataset.root = str(folder.resolve())
    return resolve_dataset(to_settings(cfg).dataset, cache_root, progress=progress)


def _parse(argv: Optional[list]) -> argparse.Namespace:
    doc = __doc__.replace("``", "").split("\n\n")
    p = argparse.ArgumentParser(prog="python -m fastpipe.pack", description=doc[0].split(": ", 1)[1],
                                epilog="\n\n".join(doc[1:3]), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", nargs="?", help="ImageFolder path, or a built-in dataset name (shapes)")
    p.add_argument("out", nargs="?", help="the pack file to write (written atomically)")
    p.add_argument("overrides", nargs="*", help="dataset.KEY=VALUE settings (as on fastpipe's command line)")
    p.add_argument("--verify", metavar="FILE", help="check every chunk checksum of FILE; exit 2 naming a bad chunk")
    p.add_argument("--size", type=int, nargs="+", metavar="N",
                   help="stored size: N (square) or HEIGHT WIDTH; default: dataset.image_size, 8/7 of it "
                        "with dataset.augment=true (the same rule as data=mmap's cache)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="decoding (or --verify checksum) threads (default: CPU cores)")
    p.add_argument("--chunk-images", type=int, default=DEFAULT_CHUNK_IMAGES, help="images per checksum chunk")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def main(argv: Optional[list] = None) -> int:
    """The command line; returns the exit code (0 ok, 2 bad input or a corrupt pack)."""
    args = _parse(argv)
    try:
        if args.verify:
            reader = PackReader(args.verify)
            reader.verify(progress=not args.no_progress, threads=args.threads)
            print(f"ok  {reader.describe()}")
            return 0
        if not args.src or not args.out:
            raise ConfigError("give SRC OUT to pack, or --verify FILE to check a pack")
        if args.size is not None and (len(args.size) > 2 or min(args.size) < 8):
            raise ConfigError(f"--size {' '.join(map(str, args.size))}: give N or HEIGHT WIDTH, each >= 8")
        if args.threads < 1 or args.chunk_images < 1:
            raise ConfigError("--threads and --chunk-images must be >= 1")
        from fastpipe.runtime import cache_root

        spec = resolve_source(args.src, args.overrides, cache_root(), progress=not args.no_progress)
        size = args.size[0] if args.size and len(args.size) == 1 else args.size
        shape = stored_shape(size, spec.image_size, spec.augment)
        out = pack_spec(spec, Path(args.out), shape, args.threads, not args.no_progress, args.chunk_images)
        print(f"wrote {PackReader(out).describe()}")
        return 0
    except FastpipeError as exc:
        print(f"fastpipe.pack: error: {exc}", file=sys.stderr)
        return EXIT_CODE
    except OSError as exc:  # e.g. OUT in a folder that cannot be written
        print(f"fastpipe.pack: error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_CODE


if __name__ == "__main__":
    sys.exit(main())
