"""How fast data=mmap's loader alone delivers batches from a pack: no model, images per second per epoch.

Builds the training loader exactly as a run does (``python -m fastpipe``'s config: data=mmap with
data.path=PACK and the given overrides), then times whole epochs of batches ready on the training
device (a CUDA synchronise at the end of each). ``--cold`` first evicts the pack's files from the
page cache (posix_fadvise DONTNEED on every file of the pack: no root needed), so epoch 1 reads
from the disk and epoch 2 from memory. Prints one JSON line last: img/s per epoch, the loader's
description, and the pack's bytes.

    python benchmarks/lib/pack_read.py --pack /tmp/p.fppack --cold --epochs 2 -- dataset=shapes ...
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def pack_files(pack: Path) -> list:
    return sorted(pack.glob("*.fppack")) if pack.is_dir() else [pack]


def evict(files) -> None:
    """Drop the files' pages from the page cache (clean pages only; the packs are synced)."""
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pack", type=Path, required=True)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--cold", action="store_true", help="evict the pack from the page cache before epoch 1")
    p.add_argument("--max-batches", type=int, default=None, help="at most this many batches per epoch")
    p.add_argument("overrides", nargs="*", help="Hydra overrides (dataset, train.batch_size, data.*, device)")
    a = p.parse_args(argv)
    sys.path.insert(0, str(REPO))
    import torch
    from hydra import compose, initialize_config_dir

    from fastpipe.config import register_configs, to_settings
    from fastpipe.data import build_loader
    from fastpipe.data.splits import build_dataset
    from fastpipe.runtime import Dist, Runtime, cache_root, cpu_cores

    register_configs()
    overrides = ["data=mmap", f"data.path={a.pack}", "data.verify=false", *a.overrides]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    s = to_settings(cfg, {"data": "mmap"}, check=False)
    device = torch.device("cuda" if torch.cuda.is_available() and s.device != "cpu" else "cpu")
    runtime = Runtime(device, Dist(), cache_root(), cpu_cores())
    splits = build_dataset(s.dataset, runtime, "dataset")
    loader = build_loader(s.data, splits, runtime, s.train.batch_size, s.seed, True, device.type == "cuda")
    if a.cold:
        evict(pack_files(a.pack))
    rates = []
    for epoch in range(a.epochs):
        loader.set_epoch(epoch)
        start, images = time.perf_counter(), 0
        for i, (x, _) in enumerate(loader):
            images += len(x)
            if a.max_batches and i + 1 >= a.max_batches:
                break
        if device.type == "cuda":
            torch.cuda.synchronize()
        rates.append(images / (time.perf_counter() - start))
    size = sum(f.stat().st_size for f in pack_files(a.pack))
    print(json.dumps({"img_per_s": rates, "images_per_epoch": images, "cold": a.cold, "pack_bytes": size,
                      "loader": loader.describe(), "device": str(device)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
