"""data=mmap and the pack format: pack, verify, corrupt files, the loader's batches, training."""
from __future__ import annotations


import numpy as np
import pytest
import torch
from conftest import cpu_runtime, make_settings

from fastpipe.cli.pack import main as pack_main
from fastpipe.data import build_loader, shapes
from fastpipe.data.folders import scan_image_folder
from fastpipe.data.images import image_transform
from fastpipe.data.pack.format import HEADER
from fastpipe.data.pack.reader import PackReader
from fastpipe.data.pack.writer import PackWriter
from fastpipe.data.splits import build_dataset
from fastpipe.errors import ConfigError, DataError
from fastpipe.runtime import Dist

from ..conftest import composed

TINY_MMAP = ["data=mmap", "dataset.num_images=240", "dataset.image_size=16", "train.batch_size=16",
             "runtime.progress=false"]


def build(overrides=(), train=True, dist=Dist(), channels_last=False, data="mmap"):
    """A loader built as graph.build builds it, on the CPU."""
    base = [o for o in TINY_MMAP if "dataset=imagefolder" not in overrides or not o.startswith("dataset.num")]
    s = composed([*base, *overrides] if data == "mmap" else list(overrides))  # 14 of them, 3 lists
    splits = build_dataset(s.dataset, cpu_runtime(), s.choices["dataset"])
    return build_loader(s.data, splits, cpu_runtime(dist), s.train.batch_size, s.seed, train, channels_last)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A small ImageFolder of 40x30 JPEGs (3 classes)."""
    return shapes.generate(tmp_path_factory.mktemp("mmap") / "images", 3, 240, (40, 30), seed=5)


@pytest.fixture(scope="module")
def packed(folder, tmp_path_factory):
    """The folder packed at 24x24 in chunks of 64 images (4 chunks)."""
    out = tmp_path_factory.mktemp("pack") / "images.fppack"
    assert pack_main([str(folder), str(out), "--size", "24", "--threads", "1", "--chunk-images", "64",
                      "--no-progress"]) == 0
    return out


def corrupt_copy(src, dst, offset, value=None, size=None):
    data = bytearray(src.read_bytes())
    if value is not None:
        data[offset:offset + len(value)] = value
    else:
        data[offset] ^= 0xFF
    dst.write_bytes(bytes(data[:size]))
    return dst


def test_pack_holds_the_folder_decoded_as_data_default_would(folder, packed, capsys):
    classes, tr_files, tr_labels, va_files, va_labels = scan_image_folder(folder, 0.2)
    pack = PackReader(packed)
    assert (pack.count, pack.shape, pack.classes, pack.chunk_images) == (240, (24, 24, 3), classes, 64)
    assert pack.labels.tolist() == tr_labels + va_labels
    assert pack.split.tolist() == [0] * len(tr_files) + [1] * len(va_files)
    assert pack_main(["--verify", str(packed), "--no-progress"]) == 0
    assert "240 images" in capsys.readouterr().out
    from PIL import Image
    for i, path in [(0, tr_files[0]), (len(tr_files), va_files[0])]:  # same pixels as data=default's resize
        expected = image_transform(24, False)(Image.open(path).convert("RGB")).permute(1, 2, 0).numpy()
        assert np.array_equal(pack.images[i], expected)
    assert not list(packed.parent.glob(".*tmp*"))  # the atomic writer left no temporary file


def test_a_flipped_image_byte_is_refused_before_training(packed, folder, tmp_path):
    """data.verify=true (the default) checks the chunks before training (python -m fastpipe.pack --verify
    on the same file: tests/integration/test_cli.py)."""
    pack = PackReader(packed)
    offset = pack.data_offset + 2 * 64 * 24 * 24 * 3 + 1000  # inside chunk 2 (images 128..191)
    bad = corrupt_copy(packed, tmp_path / "flip.fppack", offset)
    with pytest.raises(DataError, match="chunk 2"):
        build([f"data.path={bad}", "dataset=imagefolder", f"dataset.root={folder}"])


@pytest.mark.parametrize("size", [30, HEADER.size + 20, 4096 + 100, -1])
def test_truncated_pack_fails_when_opened(packed, tmp_path, size):
    bad = corrupt_copy(packed, tmp_path / "cut.fppack", 0, value=b"", size=size)
    with pytest.raises(DataError, match=r"cut\.fppack is truncated"):
        PackReader(bad)


def test_bad_magic_unknown_version_and_corrupt_header(packed, tmp_path):
    with pytest.raises(DataError, match=r"magic\.fppack is not a fastpipe pack \(bad magic"):
        PackReader(corrupt_copy(packed, tmp_path / "magic.fppack", 0, value=b"NOTAPACK"))
    with pytest.raises(DataError, match=r"v9\.fppack has format version 9, but this fastpipe reads versions 1, 2"):
        PackReader(corrupt_copy(packed, tmp_path / "v9.fppack", 8, value=(9).to_bytes(4, "little")))
    with pytest.raises(DataError, match="corrupt header"):  # a flipped label: the header checksum catches it
        PackReader(corrupt_copy(packed, tmp_path / "index.fppack", HEADER.size + PackReader(packed).meta_size + 2))
    with pytest.raises(DataError, match="does not exist"):
        PackReader(tmp_path / "missing.fppack")


def test_interrupted_pack_leaves_nothing_that_looks_complete(tmp_path):
    out = tmp_path / "half.fppack"
    with pytest.raises(KeyboardInterrupt):
        with PackWriter(out, 8, 8, ["a", "b"], [0, 1, 0], [0, 0, 1]) as writer:
            writer.write(np.zeros((8, 8, 3), np.uint8))
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_pack_cli_bad_input_is_one_clear_line(tmp_path, capsys):
    assert pack_main([str(tmp_path / "nope"), str(tmp_path / "x.fppack")]) == 2
    assert f"{tmp_path / 'nope'} is not a folder (SRC given as a path is an ImageFolder)" in capsys.readouterr().err
    assert pack_main(["shapes", str(tmp_path / "x.fppack"), "dataset.no_such_key=1"]) == 2
    assert "no_such_key" in capsys.readouterr().err
    assert not (tmp_path / "x.fppack").exists()


def test_cache_is_packed_once_and_keyed_by_the_pack_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTPIPE_CACHE", str(tmp_path))
    first = build()
    assert "(cache, packed now)" in first.describe()
    packs = list((tmp_path / "packs").glob("*.fppack"))
    stamp = packs[0].stat().st_mtime_ns
    assert "(cache, reused)" in build().describe() and "(cache, reused)" in build(train=False).describe()
    assert packs[0].stat().st_mtime_ns == stamp and len(list((tmp_path / "packs").glob("*.fppack"))) == 1
    assert "stored=20x24" in build(["data.stored_size=[20,24]"]).describe()  # another setting, another file
    assert len(list((tmp_path / "packs").glob("*.fppack"))) == 2


def test_one_process_packs_while_the_others_wait_for_it(tmp_path, monkeypatch):
    import fcntl
    import threading

    import shutil

    from fastpipe.data.pack.cache import ensure_cached_pack

    monkeypatch.setenv("FASTPIPE_CACHE", str(tmp_path))
    spec = build_dataset(composed(TINY_MMAP).dataset, cpu_runtime(), "shapes")
    path, how = ensure_cached_pack(spec, tmp_path / "a", (16, 16))
    assert how == "packed now" and ensure_cached_pack(spec, tmp_path / "a", (16, 16)) == (path, "reused")
    target = tmp_path / "b" / "packs" / path.name
    target.parent.mkdir(parents=True)
    real_flock, waiting = fcntl.flock, threading.Event()
    with open(target.parent / f".{path.name}.lock", "w") as lock:  # "another rank" holds the lock
        real_flock(lock, fcntl.LOCK_EX)
        monkeypatch.setattr(fcntl, "flock", lambda f, op: (waiting.set(), real_flock(f, op))[1])
        result = []
        waiter = threading.Thread(target=lambda: result.append(ensure_cached_pack(spec, tmp_path / "b", (16, 16))))
        waiter.start()
        assert waiting.wait(30)  # the waiter found no pack and now blocks on the lock
        shutil.copy(path, target)  # "the other rank" finishes the pack while holding the lock
    waiter.join(30)
    assert result == [(target, "packed by another process")]


def test_held_out_batches_equal_data_default_and_augment_changes_shapes_per_epoch():
    mm, ref = build(train=False), build(["data.num_workers=0", *TINY_MMAP[1:]], train=False, data="default")
    (a, la), (b, lb) = next(iter(mm)), next(iter(ref))
    assert torch.equal(la, lb) and torch.equal(a, b)  # stored at image_size: identical tensors
    aug = build(["dataset.augment=true"], channels_last=True)
    assert "stored=18x18" in aug.describe() and "random-resized-crop+flip" in aug.describe()
    aug.set_epoch(0)
    x0, y0 = next(iter(aug))
    assert x0.shape == (16, 3, 16, 16) and x0.dtype == torch.float32
    assert x0.is_contiguous(memory_format=torch.channels_last)
    aug.set_epoch(0)
    assert torch.equal(next(iter(aug))[0], x0)  # crops and order are a function of (seed, epoch)
    aug.set_epoch(1)
    assert not torch.equal(next(iter(aug))[0], x0)
    held = build(["dataset.augment=true"], train=False)
    assert next(iter(held))[0].shape[1:] == (3, 16, 16) and "resize" in held.describe()


def test_sharding_gives_each_rank_its_own_samples_and_evaluates_each_once():
    world = 3
    loaders = [build(dist=Dist(r, world, r, world)) for r in range(world)]
    assert len({len(ld) for ld in loaders}) == 1  # DDP: the same number of steps on every rank
    firsts = []
    for epoch in (0, 1):
        shards = []
        for ld in loaders:
            ld.set_epoch(epoch)
            shards.append(np.concatenate(ld.loader.epoch_batches()))
        seen = np.concatenate(shards)
        assert len(seen) == len(set(seen.tolist())) == world * len(loaders[0]) * 16  # disjoint shards
        firsts.append(shards[0])
    assert not np.array_equal(*firsts)  # reshuffled each epoch
    evals = [build(train=False, dist=Dist(r, world, r, world)) for r in range(world)]
    labels = torch.cat([y for ld in evals for _, y in ld])
    pack = evals[0].loader.source.reader
    val = pack.indices(1)
    assert len(labels) == len(val) and labels.tolist() == pack.labels[val].tolist()


def test_resume_skips_whole_batches_without_reading_them():
    ld = build()
    ld.set_epoch(2)
    full = [y for _, y in ld]
    assert ld.skip_next(2) is True  # batches
    assert [y.tolist() for _, y in ld] == [y.tolist() for y in full[2:]]


def test_pack_setting_mismatches_are_clear_errors(packed, folder, tmp_path, monkeypatch):
    ds = ["dataset=imagefolder", f"dataset.root={folder}"]
    with pytest.raises(DataError, match=r"holds \d+ train / \d+ val images of classes"):
        build([f"data.path={packed}"])  # a pack of another dataset (shapes has 4 classes)
    with pytest.raises(ConfigError, match="smaller than dataset.image_size=32"):
        build([f"data.path={packed}", *ds, "dataset.image_size=32"])
    with pytest.raises(ConfigError, match="data.stored_size=16 but the pack"):
        build([f"data.path={packed}", *ds, "data.stored_size=16"])
    with pytest.raises(ConfigError, match="data.stored_size"):
        make_settings(["data=mmap", "data.stored_size=[1,2,3]"])
    monkeypatch.setenv("FASTPIPE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ConfigError, match=r"data.stored_size=16 is smaller than dataset.image_size=32: the cache "
                                          r"would store 16x16 images; give data.stored_size >= 32, or null"):
        build([*ds, "dataset.image_size=32", "data.stored_size=16"])
    assert not list((tmp_path / "cache").rglob("*.fppack"))  # refused before packing anything
    with pytest.raises(ConfigError, match="data=mmap cannot read dataset=synthetic: it is generated on the device"):
        build(["dataset=synthetic"])


def test_a_jpeg_quality_no_pack_of_this_run_uses_is_said_in_a_warning(folder, packed):
    """data.quality sets only the cache's data.codec=jpeg packing: with a raw cache or a given pack it did
    nothing without a word."""
    from fastpipe.record.run_warnings import collect_warnings

    given = ["dataset=imagefolder", f"dataset.root={folder}", "dataset.image_size=24", f"data.path={packed}"]
    for extra, reads in (([], "a raw pack (data.codec=null)"), (given, "the given pack (data.path), read as it was written")):
        with collect_warnings([]) as said:
            build(["data.quality=50", *extra])
        assert said == [f"data.quality=50 does nothing here: it is the JPEG quality of the cache's data.codec=jpeg "
                        f"pack, and this run reads {reads}; drop data.quality, or add data.codec=jpeg"], said
