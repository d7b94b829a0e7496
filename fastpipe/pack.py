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
import os
import sys
from pathlib import Path
from typing import Optional

from fastpipe.data.cache import pack_spec, stored_shape
from fastpipe.data.packfile import DEFAULT_CHUNK_IMAGES, PackReader
from fastpipe.errors import EXIT_CODE, ConfigError, DataError, FastpipeError


def resolve_source(src: str, overrides: list, cache_root: Path, progress: bool):
    """SRC (a folder, or a conf/dataset name) + ``dataset.KEY=VALUE`` overrides -> a DatasetSpec."""
    from hydra import compose, initialize_config_dir

    from fastpipe.config import config_dir, register_configs, to_settings
    from fastpipe.data.datasets import resolve_dataset

    bad = [o for o in overrides if not o.startswith("dataset.")]
    if bad:
        raise ConfigError(f"{bad[0]!r}: only dataset.KEY=VALUE settings can follow SRC OUT")
    folder = Path(src).expanduser()
    builtin = (Path(config_dir()) / "dataset" / f"{src}.yaml").is_file() and src != "imagefolder"
    if not folder.is_dir() and not builtin:
        raise DataError(f"{src} is neither a folder of images nor a built-in dataset (shapes); give an "
                        "ImageFolder path (one sub-folder per class) or a dataset name")
    register_configs()
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
