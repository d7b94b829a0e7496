"""Reading faults and settings that would silently do less than they say: a shuffle buffer too small
to shuffle, a cache folder that cannot be made, a truncated JPEG under data=dali."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import cpu_runtime, needs_dali
from PIL import Image

from fastpipe.data.pack.lanes import LanePlan
from fastpipe.errors import ConfigError


def jpegs(root: Path, per_class: int = 10, size=(40, 30)) -> Path:
    """Two classes of random-noise JPEGs."""
    rng = np.random.default_rng(0)
    for name in ("cat", "dog"):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.jpg", quality=90)
    return root


# ------------------------------------------------------------------ data.shuffle_buffer
@pytest.mark.parametrize("buffer", [1, 64, 127])
def test_a_shuffle_buffer_below_two_samples_a_lane_is_refused_naming_the_smallest_that_shuffles(buffer):
    with pytest.raises(ConfigError, match=rf"data.shuffle_buffer={buffer} shuffles nothing: .* 64 lanes.* "
                                          r"use data.shuffle_buffer=128 or more, 0 .*, or auto"):
        LanePlan(2382, np.array([0]), 1, 0, 64, 0, buffer, True)


def test_the_smallest_accepted_shuffle_buffer_gives_each_epoch_another_order():
    """One-file pack (one piece a lane, class-sorted): 2 samples a lane already reorder every epoch."""
    plan = LanePlan(2382, np.array([0]), 1, 0, 64, 0, 128, True)
    first, second = plan.epoch(0), plan.epoch(1)
    assert sum(np.array_equal(a, b) for a, b in zip(first, second)) == 0
    lane0 = np.array([b[0] for b in first])
    assert not np.array_equal(lane0, np.sort(lane0))  # not read in the pack's order
    assert plan.shuffle_buffer == 128


# ------------------------------------------------------------------ FASTPIPE_CACHE that cannot be made
def test_a_cache_folder_that_cannot_be_created_is_one_line_naming_fastpipe_cache(tmp_path):
    """/proc/nope: mkdir fails with ENOENT (not EACCES or ENOTDIR) although its parent exists."""
    from fastpipe.data.pack.cache import ensure_cached_pack
    from fastpipe.data.images import image_folder, shapes
    from fastpipe.data.splits import DataSplits
    from fastpipe.errors import DataError

    fix = r"; set FASTPIPE_CACHE to a writable folder$"
    with pytest.raises(DataError, match=r"^cannot write to /proc/nope \(cannot create /proc/nope\)" + fix):
        shapes(num_images=40, cache_root="/proc/nope")
    built = image_folder(str(jpegs(tmp_path / "imgs")), image_size=8)
    with pytest.raises(DataError, match=r"^cannot write to /proc/nope/packs \(cannot create /proc/nope\)" + fix):
        ensure_cached_pack(DataSplits("imagefolder", built["train"], built["val"]), "/proc/nope", (8, 8))


# ------------------------------------------------------------------ data=dali on a truncated JPEG
@needs_dali
@pytest.mark.filterwarnings("ignore::UserWarning")  # DALI on a CPU-only machine
def test_a_truncated_jpeg_under_dali_is_one_line_naming_the_file(tmp_path):
    """Its header reads (the check before training passes it), its data ends half-way: DALI's
    decoder fails on the batch holding it, as PIL does under data=default."""
    from fastpipe.config import DaliLoaderConfig
    from fastpipe.data import build_loader
    from fastpipe.data.images import image_folder
    from fastpipe.data.splits import DataSplits
    from fastpipe.errors import DataError

    root = jpegs(tmp_path / "imgs", size=(400, 300))
    trunc = root / "dog" / "trunc.jpg"
    whole = (root / "dog" / "0.jpg").read_bytes()
    trunc.write_bytes(whole[: len(whole) // 2])
    built = image_folder(str(root), image_size=16, augment=False, val_fraction=0.2)
    train = built["train"]
    assert str(trunc) in train.files
    splits = DataSplits("imagefolder", train, built["val"])
    dl = build_loader(DaliLoaderConfig(num_threads=1), splits, cpu_runtime(), 4, 0, train=True, channels_last=False)
    with pytest.raises(DataError) as caught:
        for _ in dl:
            pass
    assert str(caught.value) == (f"cannot read image {trunc}: DALI's decoder fails on it; remove or replace the file "
                                 "(data=default says what is wrong with it)")
