"""Data that is not what it should be: 16-bit images, symlinked and empty class folders, a damaged
shapes cache, leftovers of dead writers, an unwritable cache, unreadable image files."""
from __future__ import annotations

import errno
import json
import os
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import cpu_runtime
from PIL import Image
from torchvision.transforms import PILToTensor

from fastpipe.config import DaliLoaderConfig, DefaultLoaderConfig, MmapLoaderConfig
from fastpipe.data import build_loader
from fastpipe.data.device import MEAN, STD
from fastpipe.data.folders import scan_image_folder
from fastpipe.data.images import ImageFiles, image_folder, shapes
from fastpipe.data.splits import DataSplits
from fastpipe.errors import DataError

DEAD_PID = 99_999_999  # above any pid_max: no such process
GRADIENT = np.linspace(0, 65535, 32 * 32).reshape(32, 32).astype(np.uint16)  # mean 32767.5: 127.5 of 255


def write_images(folder: Path, count: int, size=(12, 12)) -> list:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{i}.png" for i in range(count)]
    for i, p in enumerate(paths):
        Image.new("RGB", size, (i * 40 % 256, 90, 160)).save(p)
    return paths


def pixels(images: torch.Tensor) -> torch.Tensor:
    """Normalised N x 3 x H x W batches back in 0..255."""
    return (images * torch.tensor(STD).view(1, 3, 1, 1) + torch.tensor(MEAN).view(1, 3, 1, 1)) * 255


def decoded(path) -> np.ndarray:
    """What data=default (and the pack writer) make of one file: H x W x 3 uint8."""
    image, _ = ImageFiles([str(path)], [0], ["a"], 8, transform=PILToTensor())[0]
    return image.permute(1, 2, 0).numpy()


# 1. 16-bit and float images

@pytest.fixture(scope="module")
def sixteen_bit(tmp_path_factory):
    """Two classes of 16-bit grayscale PNGs (Pillow writes mode I;16), 32x32: loaded at 32, no resize."""
    root = tmp_path_factory.mktemp("png16")
    for name in ("a", "b"):
        (root / name).mkdir()
        for i in range(10):
            Image.fromarray(GRADIENT).save(root / name / f"{i}.png")
    assert Image.open(root / "a" / "0.png").mode == "I;16"
    built = image_folder(str(root), image_size=32, augment=False)
    return DataSplits("imagefolder", built["train"], built["val"])


def held_out_pixels(cfg, splits) -> torch.Tensor:
    return pixels(torch.cat([x for x, _ in build_loader(cfg, splits, cpu_runtime(), 8, 0, False, False)]))


def test_16bit_png_keeps_its_brightness_in_data_default_and_the_pack(sixteen_bit, tmp_path, monkeypatch):
    expected = torch.from_numpy(np.rint(GRADIENT / 257).astype(np.float32))  # 65535 -> 255
    monkeypatch.setenv("FASTPIPE_CACHE", str(tmp_path))
    for cfg in (DefaultLoaderConfig(num_workers=0), MmapLoaderConfig(num_threads=1, pack_threads=1)):
        got = held_out_pixels(cfg, sixteen_bit)
        assert abs(float(got.mean()) - 127.5) < 0.5, (cfg.name, float(got.mean()))  # was ~254 (clipped)
        assert float((got - expected).abs().max()) < 0.01, cfg.name  # every channel, every pixel: x / 257


def test_dali_cpu_decoder_scales_16bit_png_itself(sixteen_bit):
    """Measured: DALI 2.4's CPU decoder converts 16-bit PNGs (gray and RGB) to 8 bits correctly, so
    data=dali reads them as they are; it agrees with data=default to within rounding."""
    pytest.importorskip("nvidia.dali", reason='NVIDIA DALI is not installed: pip install "fastpipe[dali]"')
    got = held_out_pixels(DaliLoaderConfig(num_threads=1), sixteen_bit)
    assert abs(float(got.mean()) - 127.5) < 0.5, float(got.mean())
    ref = held_out_pixels(DefaultLoaderConfig(num_workers=0), sixteen_bit)
    assert float((got - ref).abs().max()) <= 1.01


def test_high_bit_modes_scale_from_their_bit_depth(tmp_path):
    """TIFF files in PIL's other high-bit modes: I;16B, I (16-bit values, and 32-bit ones), F."""
    big_endian = Image.frombytes("I;16B", (32, 32), GRADIENT.astype(">u2").tobytes())
    wide = GRADIENT.astype(np.int64) * 32768  # beyond 16 bits: scaled by 2**32 - 1
    ramp = np.linspace(-0.5, 1.5, 32 * 32, dtype=np.float32).reshape(32, 32)  # floats: 0..1, clipped
    cases = {"be16": (big_endian, np.rint(GRADIENT / 257)),
             "i16": (Image.fromarray(GRADIENT.astype(np.int32)), np.rint(GRADIENT / 257)),
             "i32": (Image.fromarray(wide.astype(np.int32)), np.rint(wide / (2**32 - 1) * 255)),
             "float": (Image.fromarray(ramp), np.rint(np.clip(ramp, 0, 1) * 255))}
    for name, (image, expected) in cases.items():
        image.save(tmp_path / f"{name}.tiff")
        assert Image.open(tmp_path / f"{name}.tiff").mode == image.mode
        rgb = decoded(tmp_path / f"{name}.tiff")
        assert rgb.shape == (32, 32, 3) and (rgb == rgb[..., :1]).all(), name  # gray repeated into RGB
        assert np.array_equal(rgb[..., 0], expected.astype(np.uint8)), name


# 2. Image folders: symlinks, empty classes, val classes

def both_splits(root):
    classes, train, train_labels, val, val_labels = scan_image_folder(root, 0.5)
    return classes, train + val, train_labels + val_labels


def test_symlinked_folders_are_followed_as_imagefolder_does_and_loops_end(tmp_path):
    from torchvision.datasets import ImageFolder

    root, outside = tmp_path / "root", tmp_path / "outside"
    write_images(root / "a", 3)
    write_images(outside / "more", 4)
    (root / "a" / "linked").symlink_to(outside / "more")  # a symlinked sub-folder
    write_images(outside / "cls", 5)
    (root / "c").symlink_to(outside / "cls")  # a symlinked class folder
    write_images(root / "b", 2)
    classes, files, labels = both_splits(root)
    assert classes == ["a", "b", "c"] and labels.count(0) == 7 and labels.count(2) == 5
    torchvision_files = sorted(path for path, _ in ImageFolder(str(root)).samples)
    assert sorted(files) == torchvision_files
    (root / "a" / "loop").symlink_to(root / "a")  # a loop: torchvision would walk it until ELOOP
    (root / "b" / "up").symlink_to(root)
    classes, files, labels = both_splits(root)
    assert labels.count(0) == 7 and labels.count(1) == 2 + 12 and len(set(files)) == len(files)
    assert scan_image_folder(root, 0.3) == scan_image_folder(root, 0.3)  # deterministic split


def test_class_folder_without_images_is_refused_naming_it(tmp_path):
    write_images(tmp_path / "a", 3)
    write_images(tmp_path / "b", 3)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("no images here")
    with pytest.raises(DataError, match=rf"^class folder {tmp_path / 'c'} holds no images \(\.jpg, \.jpeg, \.png\); "
                                        "add images or remove the folder$"):
        scan_image_folder(tmp_path, 0.2)


def test_a_nearly_empty_folder_names_its_empty_class_folder(tmp_path):
    """a/ holds one image, b/ none: b/ is the problem, wherever a's image falls (held out: no training image)."""
    write_images(tmp_path / "a", 1)
    (tmp_path / "b").mkdir()
    for held_out in (0.0, 1.0):
        with pytest.raises(DataError, match=rf"^class folder {tmp_path / 'b'} holds no images"):
            scan_image_folder(tmp_path, held_out)


def test_val_class_missing_from_train_is_refused_naming_it(tmp_path):
    for split, names in (("train", "ab"), ("val", "abz")):
        for name in names:
            write_images(tmp_path / split / name, 2)
    with pytest.raises(DataError, match=rf"^class 'z' is in {tmp_path / 'val'} but not in {tmp_path / 'train'}"):
        scan_image_folder(tmp_path, 0.2)
    shutil.rmtree(tmp_path / "val" / "z")
    classes, tr, _, va, _ = scan_image_folder(tmp_path, 0.2)
    assert classes == ["a", "b"] and len(tr) == len(va) == 4


def test_missing_and_empty_folders_keep_their_messages(tmp_path):
    with pytest.raises(DataError, match=f"dataset folder {tmp_path / 'nope'} does not exist"):
        scan_image_folder(tmp_path / "nope", 0.2)
    (tmp_path / "a").mkdir()
    with pytest.raises(DataError, match=f"dataset folder {tmp_path} holds no images; expected"):
        scan_image_folder(tmp_path, 0.2)


# 3. The shapes cache checks itself

SMALL = {"num_classes": 3, "num_images": 60, "image_size": 16}


def test_shapes_cache_missing_a_class_is_regenerated_with_a_warning(tmp_path, capfd):
    first = shapes(cache_root=tmp_path, **SMALL)
    root = first["train"].root
    before = {p.relative_to(root): p.read_bytes() for p in root.rglob("*.jpg")}
    shutil.rmtree(root / "square")
    capfd.readouterr()
    again = shapes(cache_root=tmp_path, **SMALL)
    assert {p.relative_to(root): p.read_bytes() for p in root.rglob("*.jpg")} == before  # all back, identical
    assert again["train"].files == first["train"].files and again["val"].files == first["val"].files
    assert f"fastpipe: warning: the shapes dataset in {root} is incomplete (class folder square/ is missing); " \
           "generating it again" in capfd.readouterr().err
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["files"] == {"circle": 20, "square": 20, "triangle": 20} and manifest["seed"] == 0
    (root / "circle" / "0000000.jpg").unlink()  # one file gone
    shapes(cache_root=tmp_path, **SMALL)
    assert "(class folder circle/ holds 19 of its 20 images)" in capfd.readouterr().err
    (root / "manifest.json").write_text("{not json")
    shapes(cache_root=tmp_path, **SMALL)
    assert "(its manifest.json is missing or unreadable)" in capfd.readouterr().err
    assert len(list(root.rglob("*.jpg"))) == 60 and not list(tmp_path.glob("*.old*"))
    shapes(cache_root=tmp_path, **SMALL)
    assert capfd.readouterr().err == ""  # complete: reused silently


def test_shapes_never_regenerates_over_files_it_did_not_write(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.pdf").write_text("precious")
    with pytest.raises(DataError, match=rf"{tmp_path / 'mine'} holds 'thesis.pdf', which the shapes generator did "
                                        "not write"):
        shapes(root=str(tmp_path / "mine"), **SMALL)
    assert (tmp_path / "mine" / "thesis.pdf").read_text() == "precious"


# 4. Leftovers of dead writers

def test_dead_writers_temporary_files_are_removed_on_the_next_open(tmp_path):
    from fastpipe.data.pack.cache import ensure_cached_pack

    host = socket.gethostname()
    root = shapes(cache_root=tmp_path, **SMALL)["train"].root
    dead = [root.with_name(f"{root.name}.tmp-{DEAD_PID}"), root.with_name(f"{root.name}.tmp-{host}-{DEAD_PID}")]
    alive = root.with_name(f"{root.name}.tmp-{host}-{os.getppid()}")  # a live writer's: kept
    for folder in dead + [alive]:
        write_images(folder / "circle", 1)
    built = shapes(cache_root=tmp_path, **SMALL)
    assert not any(p.exists() for p in dead) and alive.is_dir()
    splits = DataSplits("shapes", built["train"], built["val"])
    pack, _ = ensure_cached_pack(splits, tmp_path, (16, 16))
    leftover = pack.with_name(f".{pack.name}.tmp-{os.getppid()}")  # under the lock: any writer's is dead
    leftover.write_bytes(b"half a pack")
    assert ensure_cached_pack(splits, tmp_path, (16, 16)) == (pack, "reused") and not leftover.exists()
    pack.unlink()
    leftover.write_bytes(b"half a pack")
    assert ensure_cached_pack(splits, tmp_path, (16, 16)) == (pack, "packed now") and not leftover.exists()


def corpus(folder: Path) -> str:
    """Four small text files; with val_fraction=0.5 both splits get some."""
    for name in ("one", "two", "three", "four"):
        (folder / f"{name}.txt").write_text(f"text of {name} " * 50)
    return str(folder / "*.txt")


def test_dead_token_writers_folder_is_removed(tmp_path):
    from fastpipe.data.tokens import tokens

    files = corpus(tmp_path)
    tokens(files=files, seq_len=8, val_fraction=0.5, cache_root=tmp_path / "cache")
    folder = next((tmp_path / "cache").glob("tokens-*"))
    dead = folder.with_name(f"{folder.name}.tmp-{DEAD_PID}")
    dead.mkdir()
    (dead / "train.bin").write_bytes(b"\0" * 10)
    tokens(files=files, seq_len=8, val_fraction=0.5, cache_root=tmp_path / "cache")
    assert not dead.exists()


# 5. An unwritable cache

@pytest.fixture
def read_only(tmp_path, monkeypatch):
    """A chmod 0o555 folder. Root (os.geteuid() == 0, with CAP_DAC_OVERRIDE) may write there anyway:
    then creating a folder in it raises the PermissionError the kernel gives another user."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        (folder / "probe").mkdir()
        (folder / "probe").rmdir()
        enforced = False
    except PermissionError:
        enforced = True
    if not enforced:  # every write into the cache starts by creating a folder in it
        real_mkdir = os.mkdir

        def mkdir(path, *args, **kwargs):
            if str(path).startswith(f"{folder}{os.sep}"):
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_mkdir(path, *args, **kwargs)

        monkeypatch.setattr(os, "mkdir", mkdir)
    yield folder
    folder.chmod(0o755)


def test_unwritable_cache_is_one_line_naming_the_folder_and_the_fix(read_only, tmp_path):
    from fastpipe.data.pack.cache import ensure_cached_pack
    from fastpipe.data.tokens import tokens

    fix = "; set FASTPIPE_CACHE to a writable folder"
    with pytest.raises(DataError, match=rf"^cannot write to {read_only} \(Permission denied: .*\){fix}$"):
        shapes(cache_root=read_only, **SMALL)
    with pytest.raises(DataError, match=rf"^cannot write to {read_only / 'sub'} \(Permission denied: .*\)"
                                        "; set dataset.root to a writable folder$"):
        shapes(root=str(read_only / "sub" / "shapes"), **SMALL)
    with pytest.raises(DataError, match=rf"^cannot write to {read_only} \(Permission denied: .*\){fix}$"):
        tokens(files=corpus(tmp_path), seq_len=8, val_fraction=0.5, cache_root=read_only)
    built = shapes(cache_root=tmp_path / "rw", **SMALL)
    with pytest.raises(DataError, match=rf"^cannot write to {read_only / 'packs'} \(Permission denied: .*\){fix}$"):
        ensure_cached_pack(DataSplits("shapes", built["train"], built["val"]), read_only, (16, 16))
    assert list(read_only.iterdir()) == []


# 6. Unreadable image files are found before training

def test_unreadable_files_are_found_when_the_dataset_is_built(tmp_path):
    for name in ("a", "b"):
        write_images(tmp_path / name, 12)
    (tmp_path / "a" / "3.png").write_bytes(b"not an image at all")
    (tmp_path / "b" / "7.png").write_bytes(b"")
    _, tr, _, va, _ = scan_image_folder(tmp_path, 0.2)
    first = next(f for f in tr + va if f.endswith(("a/3.png", "b/7.png")))
    with pytest.raises(DataError, match=rf"^cannot read image {first}: cannot identify image file .*; remove or "
                                        r"replace the file \(2 of the 24 image files cannot be read; this is the first\)$"):
        image_folder(str(tmp_path), image_size=8)


def test_corrupt_data_behind_a_good_header_still_fails_at_its_batch(tmp_path):
    for name in ("a", "b"):
        write_images(tmp_path / name, 6)
    broken = tmp_path / "a" / "2.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(broken)
    broken.write_bytes(broken.read_bytes()[:200])  # header intact, pixels cut off
    built = image_folder(str(tmp_path), image_size=8, augment=False)
    split = next(ds for ds in built.values() if str(broken) in ds.files)
    with pytest.raises(DataError, match=rf"^cannot read image {broken}: image file is truncated; remove or replace "
                                        "the file$"):
        split[split.files.index(str(broken))]
