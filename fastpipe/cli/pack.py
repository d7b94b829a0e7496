"""``python -m fastpipe.pack``: decode a dataset once into a pack that ``data=mmap`` memory-maps.

    python -m fastpipe.pack /data/imagenet-folder imagenet.fppack --size 256
    python -m fastpipe.pack /data/imagenet-folder imagenet-jpeg --codec jpeg --quality 90 --shard-size 2GB
    python -m fastpipe.pack shapes shapes.fppack dataset.num_images=4096 dataset.source_size=[500,375]
    python -m fastpipe.pack --verify imagenet.fppack        (or a sharded pack's folder, or its index.json)

SRC is an ImageFolder (same class/split rules as ``dataset=imagefolder``) or a dataset by its
config name (``shapes``, or a project's with ``--config-dir DIR``), composed exactly as a training
run composes it; ``dataset.KEY=VALUE`` arguments change its settings. SRC spelled as a path (with
a ``/``, or a leading ``.`` or ``~``) or naming an existing folder is the folder (./shapes); only a
bare name that is no folder here is a config name. A stream (an IterableDataset) cannot be
packed. OUT of the other kind (a pack file with --shard-size, a sharded pack's folder without it),
or a finished pack of other files or settings, is refused before packing; --force replaces it. A
sharded pack's missing or cut shards are packed again by the command that packed the folder. Image
datasets become an
images pack (raw pixels, or JPEG files with --codec jpeg; one file, or with --shard-size a folder
of shards and an index), other datasets of fixed-shape samples a records pack. Images are packed
by a pool of --threads processes; a pack killed half-way is resumed by the same command, and a
second command packing the same OUT waits for the first and then uses its pack. The format is
documented in fastpipe/data/pack/format.py.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Optional

import torch

from fastpipe.config import config_dir

from fastpipe.data.pack.cache import pack_images, stored_shape
from fastpipe.data.pack.format import DEFAULT_CHUNK_IMAGES
from fastpipe.data.pack.parts import check_out, refuse_another_pack, remove_other_kind
from fastpipe.data.pack.reader import PackReader
from fastpipe.data.pack.records import pack_records
from fastpipe.data.pack.shards import PackSet, index_of, verify_sharded
from fastpipe.data.streams import is_stream
from fastpipe.errors import EXIT_CODE, ConfigError, DataError, FastpipeError

UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
         "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_bytes(text: str) -> int:
    """``2GB``, ``500MB``, ``1.5GiB``, ``4096`` -> bytes (KB/MB/GB: powers of 1000; KiB/MiB/GiB: of 1024)."""
    number = text.strip().rstrip("bBiIkKmMgGtT")
    unit = text.strip()[len(number):].upper()
    try:
        value = float(number) * UNITS[unit]
    except (ValueError, KeyError):
        value = 0
    if value < 1:
        raise ConfigError(f"--shard-size {text}: give bytes with a unit, e.g. 2GB, 500MB or 1GiB")
    return int(value)


def _named(src: str, project_conf: Optional[str]) -> bool:
    dirs = [config_dir()] + ([project_conf] if project_conf else [])
    return src != "imagefolder" and any((Path(d) / "dataset" / f"{src}.yaml").is_file() for d in dirs)


def _as_path(src: str) -> bool:
    """SRC spelled as a path (a separator, or a leading ``.`` or ``~``): always a folder, never a config name."""
    return os.sep in src or bool(os.altsep and os.altsep in src) or src.startswith((".", "~"))


def source_folder(src: str, project_conf: Optional[str]) -> Optional[Path]:
    """The folder SRC names, or None for a dataset config's name: a path, or an existing folder, is the
    folder; only a bare name that is no folder here is a config (a warning when both exist)."""
    folder = Path(src).expanduser()
    if _as_path(src):
        if not folder.is_dir():
            raise DataError(f"{src} is not a folder (SRC given as a path is an ImageFolder); give an existing "
                            "folder, or a dataset name (shapes) without a path")
        return folder
    named = _named(src, project_conf)
    if folder.is_dir():
        if named:
            print(f"fastpipe.pack: warning: packing the folder {src}, not dataset={src} (a dataset config of that "
                  "name exists: run from another folder to pack it)", file=sys.stderr)
        return folder
    if not named:
        raise DataError(f"{src} is neither a folder of images nor a dataset config (shapes, or one in "
                        "--config-dir); give an ImageFolder path (one sub-folder per class) or a dataset name")
    return None


def resolve_source(src: str, overrides: list, progress: bool, project_conf: Optional[str] = None):
    """SRC (a folder, or a dataset config's name) + ``dataset.KEY=VALUE`` overrides -> DataSplits."""
    from hydra import compose, initialize_config_dir

    from fastpipe.config import register_configs, to_settings
    from fastpipe.data.splits import build_dataset
    from fastpipe.runtime import Dist, Runtime, cache_root, cpu_cores

    bad = [o for o in overrides if not o.startswith("dataset.")]
    if bad:
        raise ConfigError(f"{bad[0]!r}: only dataset.KEY=VALUE settings can follow SRC OUT")
    folder = source_folder(src, project_conf)
    named = folder is None
    register_configs()
    extra = [f"hydra.searchpath=[file://{Path(project_conf).resolve()}]"] if project_conf else []
    root = [f"dataset.root={folder.resolve()}"] if not named else []
    try:
        with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
            cfg = compose("config", overrides=[f"dataset={src if named else 'imagefolder'}"] + root + overrides + extra)
    except Exception as exc:  # Hydra's own message names the bad override; its cause says why
        why = f" ({str(exc.__cause__).splitlines()[0]})" if exc.__cause__ else ""
        raise ConfigError(str(exc).splitlines()[0] + why) from exc
    settings = to_settings(cfg, {"dataset": src if named else "imagefolder"}, check=False)
    settings.dataset.check()
    runtime = Runtime(torch.device("cpu"), Dist(), cache_root(), cpu_cores())
    return build_dataset(settings.dataset, runtime, src if named else "imagefolder", progress=progress)


def _parse(argv: Optional[list]) -> argparse.Namespace:
    doc = __doc__.replace("``", "").split("\n\n")
    p = argparse.ArgumentParser(prog="python -m fastpipe.pack", description=doc[0].split(": ", 1)[1],
                                epilog="\n\n".join(doc[1:3]), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", nargs="?", help="ImageFolder path (a path or an existing folder is always the folder), or a dataset "
                   "config's bare name (shapes)")
    p.add_argument("out", nargs="?", help="the pack file to write (written atomically)")
    p.add_argument("overrides", nargs="*", help="dataset.KEY=VALUE settings (as on fastpipe's command line)")
    p.add_argument("--verify", metavar="PACK", help="check every chunk checksum of PACK (a file, or a sharded pack's "
                   "folder or index: every shard on its own); exit 2 naming a bad chunk and its file")
    p.add_argument("--size", type=int, nargs="+", metavar="N",
                   help="stored size: N (square) or HEIGHT WIDTH; default: dataset.image_size, 8/7 of it "
                        "with dataset.augment=true (the same rule as data=mmap's cache)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="processes decoding and encoding images (--verify: checksum threads) (default: CPU cores)")
    p.add_argument("--codec", choices=("raw", "jpeg"), default="raw",
                   help="raw: uint8 pixels (decoded once, read as they are); jpeg: a JPEG file per image at the "
                        "stored size, decoded per batch (about 1/10 of the bytes)")
    p.add_argument("--quality", type=int, default=90, help="--codec jpeg: JPEG quality 1-100 (default 90)")
    p.add_argument("--shard-size", metavar="SIZE", help="write OUT as a folder of shards of about SIZE (2GB, 500MB, "
                   "1GiB) and an index.json; each shard holds one split, training images shuffled once")
    p.add_argument("--force", action="store_true", help="pack again even if OUT already holds this pack; replaces a pack of "
                   "other files or settings, or of the other kind (a pack file with --shard-size, a sharded pack's "
                   "folder without it)")
    p.add_argument("--chunk-images", type=int, default=DEFAULT_CHUNK_IMAGES, help="images per checksum chunk")
    p.add_argument("--config-dir", metavar="DIR", help="a project's conf/ folder, for its own dataset configs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def _outcome(out: Path, how: str, seconds: float, unit: str) -> str:
    """The line a packing ends with: the pack reused, packed by another process, or written (its rate in
    ``unit`` per second: images, or a records pack's records)."""
    pack = PackSet(out)
    what = pack.describe()
    if how == "reused":
        return f"{out} already holds this pack (same files and settings): {what}; --force packs it again"
    if how == "packed by another process":
        return f"{out} was packed by another process while this one waited: {what}"
    rate = f", packed in {seconds:.1f} s ({pack.count / seconds:,.0f} {unit}/s)"
    return f"wrote {what}" + ("" if how == "packed now" else f"  ({how})") + rate


def main(argv: Optional[list] = None) -> int:
    """The command line; returns the exit code (0 ok, 2 bad input or a corrupt pack)."""
    args = _parse(argv)
    try:
        if args.verify:
            if index_of(Path(args.verify)) is not None:
                print(f"ok  {verify_sharded(Path(args.verify), not args.no_progress, args.threads)} (every shard verified)")
                return 0
            reader = PackReader(args.verify)
            reader.verify(progress=not args.no_progress, threads=args.threads)
            print(f"ok  {reader.describe()}")
            return 0
        if not args.src or not args.out:
            raise ConfigError("give SRC OUT to pack, or --verify PACK to check a pack")
        if args.size is not None and (len(args.size) > 2 or min(args.size) < 8):
            raise ConfigError(f"--size {' '.join(map(str, args.size))}: give N or HEIGHT WIDTH, each >= 8")
        if args.threads < 1 or args.chunk_images < 1:
            raise ConfigError("--threads and --chunk-images must be >= 1")
        if not 1 <= args.quality <= 100:
            raise ConfigError(f"--quality {args.quality}: give a JPEG quality in 1..100")
        shard_bytes = parse_bytes(args.shard_size) if args.shard_size else None
        splits = resolve_source(args.src, args.overrides, not args.no_progress, args.config_dir)
        progress = not args.no_progress
        if is_stream(splits.train) or is_stream(splits.val):
            raise ConfigError(f"dataset={splits.name} is a stream (an IterableDataset): a pack stores samples by "
                              "index, so a stream cannot be packed; train on it with data=default")
        if splits.is_synthetic or hasattr(splits.train, "read_batch"):
            raise ConfigError(f"dataset={splits.name} needs no pack: data=mmap reads it straight "
                              "(it is generated on the device, or memory-mapped already)")
        start = time.perf_counter()
        if splits.is_images:
            size = args.size[0] if args.size and len(args.size) == 1 else args.size
            shape = stored_shape(size, splits.train.image_size, splits.train.augment)
            out, how = pack_images(splits.name, splits.train, splits.val, Path(args.out), shape, args.threads,
                                   progress, args.chunk_images, args.codec, args.quality, shard_bytes, args.force)
        else:
            if args.codec != "raw" or shard_bytes:
                raise ConfigError(f"--codec and --shard-size are for image datasets; dataset={splits.name} "
                                  "gives a records pack: drop them")
            check_out(Path(args.out), False, args.force)  # a sharded pack's folder is one line, not a failed rename
            refuse_another_pack(Path(args.out), {"identity": splits.identity}, args.force)
            if args.force:
                remove_other_kind(Path(args.out), False)
            out, how = pack_records(splits.train, splits.val, Path(args.out), {"dataset": splits.name,
                                    "identity": splits.identity}, progress, args.chunk_images), "packed now"
        print(_outcome(out, how, time.perf_counter() - start, "images" if splits.is_images else "records"))
        return 0
    except FastpipeError as exc:
        print(f"fastpipe.pack: error: {exc}", file=sys.stderr)
        return EXIT_CODE
    except OSError as exc:  # e.g. OUT in a folder that cannot be written
        print(f"fastpipe.pack: error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_CODE

if __name__ == "__main__":
    sys.exit(main())
