"""Compressed and sharded packs: JPEG against raw, older versions, shard checks, what each rank reads."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading

import numpy as np
import pytest
import torch
from conftest import cpu_runtime, make_settings

from fastpipe.cli.pack import main as pack_main
from fastpipe.data import build_loader, shapes
from fastpipe.data.images import shapes as shapes_dataset
from fastpipe.data.pack.cache import ensure_cached_pack, images_key
from fastpipe.data.pack.jpeg import Decoder
from fastpipe.data.pack.lanes import LanePlan
from fastpipe.data.pack.reader import PackReader
from fastpipe.data.pack.shards import PackSet
from fastpipe.data.pack.source import PackImages
from fastpipe.data.splits import DataSplits, build_dataset
from fastpipe.errors import ConfigError, DataError
from fastpipe.runtime import Dist

from ..conftest import composed

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"),  # torch on read-only numpy views
              pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """240 JPEGs of 80x60, 3 classes (186 train, 54 held out)."""
    return shapes.generate(tmp_path_factory.mktemp("packs") / "images", 3, 240, (80, 60), seed=5)


@pytest.fixture(scope="module")
def packs(folder, tmp_path_factory):
    """The folder at 64x64: raw and JPEG files, and both as shards of 6 chunks of 16 images (a few shards a split)."""
    out = tmp_path_factory.mktemp("out")
    made = {}
    for name, extra in (("raw", []), ("jpeg", ["--codec", "jpeg"]), ("raw-shards", ["--shard-size", "1MB"]),
                        ("jpeg-shards", ["--codec", "jpeg", "--shard-size", "80KB"])):
        made[name] = out / name
        assert pack_main([str(folder), str(made[name]), "--size", "64", "--threads", "2", "--chunk-images", "16",
                          "--no-progress", *extra]) == 0
    return made


def loader(folder, path, dist=Dist(), train=True, batch=8, extra=()):
    s = composed(["data=mmap", f"data.path={path}", "dataset=imagefolder", f"dataset.root={folder}",
                       "dataset.image_size=32", f"train.batch_size={batch}", "runtime.progress=false", *extra])
    splits = build_dataset(s.dataset, cpu_runtime(), "imagefolder")
    return build_loader(s.data, splits, cpu_runtime(dist), batch, s.seed, train, False)


def test_jpeg_pack_holds_the_raw_packs_labels_and_pixels_within_3_in_255(packs, capsys):
    raw, jpeg = PackSet(packs["raw"]), PackSet(packs["jpeg"])
    assert (raw.codec, PackReader(packs["raw"]).version, jpeg.codec, PackReader(packs["jpeg"]).version) == \
        ("raw", 2, "jpeg", 3)  # only JPEG packs carry the new version
    everything = np.arange(raw.count)
    a, la = PackImages(raw).read_batch(everything)
    b, lb = PackImages(jpeg, Decoder("cpu", torch.device("cpu"), jpeg.stored, 2, False)).read_batch(everything)
    assert torch.equal(la, lb) and np.array_equal(raw.split, jpeg.split) and b.shape == a.shape == (240, 3, 64, 64)
    assert (a.float() - b.float()).abs().mean() <= 3  # quality 90, 4:4:4
    assert packs["jpeg"].stat().st_size * 4 <= packs["raw"].stat().st_size
    assert pack_main(["--verify", str(packs["jpeg"]), "--no-progress"]) == 0
    assert "64x64x3 JPEG (quality 90, 4:4:4" in capsys.readouterr().out


def test_older_packs_read_and_raw_caches_keep_their_key(packs, folder, tmp_path):
    v1 = tmp_path / "v1.fppack"
    data = bytearray(packs["raw"].read_bytes())
    data[8:12] = (1).to_bytes(4, "little")  # format version 1 (images only): the version is outside the checksum
    v1.write_bytes(bytes(data))
    old, new = PackImages(PackSet(v1)).read_batch(np.arange(240)), PackImages(PackSet(packs["raw"])).read_batch(np.arange(240))
    assert PackReader(v1).version == 1 and torch.equal(old[0], new[0]) and torch.equal(old[1], new[1])
    built = shapes_dataset(root=str(folder), num_classes=3, num_images=240, source_size=[80, 60], seed=5, image_size=64)
    train, val = built["train"], built["val"]
    h = hashlib.blake2b(digest_size=8)  # the raw images key as it was before JPEG and shards existed
    h.update(json.dumps([2, "shapes", str(train.root), train.classes, [64, 64], 256, len(train), len(val)]).encode())
    for split, ds in ((0, train), (1, val)):
        for path, label in zip(ds.files, ds.labels):
            st = os.stat(path)
            h.update(f"{split}\0{label}\0{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    assert images_key("shapes", train, val, (64, 64), 256) == h.hexdigest()
    path, how = ensure_cached_pack(DataSplits("shapes", train, val), tmp_path, (64, 64), codec="jpeg")
    assert how == "packed now" and "-jpeg90-" in path.name and PackReader(path).is_jpeg


def test_each_shard_verifies_on_its_own_and_a_bad_one_is_named(packs, folder, tmp_path, capsys):
    for name in ("raw-shards", "jpeg-shards"):
        assert pack_main(["--verify", str(packs[name]), "--no-progress"]) == 0
        assert pack_main(["--verify", str(packs[name] / "index.json"), "--no-progress"]) == 0
    index = json.loads((packs["raw-shards"] / "index.json").read_text())
    assert len(index["shards"]) >= 4 and {s["train"] > 0 for s in index["shards"]} == {True, False}  # one split each
    bad = tmp_path / "bad"
    shutil.copytree(packs["jpeg-shards"], bad)
    flipped = bad / index_shard(bad, 2)
    data = bytearray(flipped.read_bytes())
    data[-10] ^= 0xFF  # a byte of the last image
    flipped.write_bytes(bytes(data))
    truncated = bad / index_shard(bad, 0)
    truncated.write_bytes(truncated.read_bytes()[:-100])
    capsys.readouterr()
    assert pack_main(["--verify", str(bad), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{truncated} is truncated" in err and "(1 more shard(s) are bad too)" in err
    with pytest.raises(DataError, match=f"{truncated.name} is truncated"):
        loader(folder, bad)  # rank 0's training shards include shard 0: refused at open
    truncated.write_bytes((packs["jpeg-shards"] / truncated.name).read_bytes())
    with pytest.raises(DataError, match=rf"{flipped.name} is corrupt: chunk \d+ of \d+ .* fails its crc32 checksum"):
        loader(folder, bad)
    assert "shards=" in loader(folder, bad, extra=["data.verify=false"]).describe()
    # The repair a shard's message gives (not a one-file pack's), and it mends the folder: delete the bad
    # shard, lose another, and the command that packed the folder packs only those two again.
    repair = (f"it is a shard of the sharded pack {bad}: delete {flipped.name} if it is there, then run the command "
              f"that packed the folder again, `python -m fastpipe.pack SRC {bad} --shard-size SIZE` with its SRC and "
              "settings: it packs only the shards that are missing")
    assert pack_main(["--verify", str(bad), "--no-progress"]) == 2 and capsys.readouterr().err.strip().endswith(repair)
    lost = bad / index_shard(bad, 1)
    flipped.unlink(), lost.unlink()
    assert pack_main(["--verify", str(bad), "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == (f"fastpipe.pack: error: pack {lost} does not exist; "
                                               + repair.replace(flipped.name, lost.name) + " (1 more shard(s) are bad too)")
    assert pack_main([str(folder), str(bad), "--size", "64", "--chunk-images", "16", "--no-progress", "--codec", "jpeg",
                      "--shard-size", "80KB"]) == 0
    assert "(resumed (208 of 240 images were already packed))" in capsys.readouterr().out
    assert pack_main(["--verify", str(bad), "--no-progress"]) == 0


def test_a_pack_of_other_settings_is_replaced_only_with_force(packs, folder, tmp_path, capsys):
    """A second packing with other settings into the same OUT (one after the other, or waiting for the first's
    lock) would replace the first's finished pack without a word."""
    for name, extra in (("raw", []), ("raw-shards", ["--shard-size", "1MB"])):
        out = tmp_path / name
        (shutil.copytree if packs[name].is_dir() else shutil.copy)(packs[name], out)
        again = [str(folder), str(out), "--size", "48", "--chunk-images", "16", "--no-progress", *extra]
        capsys.readouterr()
        assert pack_main(again) == 2
        said = capsys.readouterr().err.strip()
        assert said.startswith(f"fastpipe.pack: error: {out} holds a pack of other files or settings (") and said.endswith(
            "): packing these into it would replace it; add --force to replace it, or choose another OUT"), said
        assert PackSet(out).stored == (64, 64)
        assert pack_main(again + ["--force"]) == 0 and PackSet(out).stored == (48, 48)


def index_shard(folder, i):
    return json.loads((folder / "index.json").read_text())["shards"][i]["file"]


def test_two_ranks_of_two_readers_read_only_their_shards_each_sample_once_per_epoch(packs, folder, monkeypatch):
    reads, lock = [], threading.Lock()  # the two reader threads of a rank record their reads in either order
    real = PackImages.read_batch

    def read_batch(self, idx, pin=False):
        with lock:
            reads.append(idx.copy())
        return real(self, idx, pin)

    monkeypatch.setattr(PackImages, "read_batch", read_batch)
    pack = PackSet(packs["jpeg-shards"])
    ranks = [loader(folder, packs["jpeg-shards"], Dist(r, 2, r, 2), extra=["data.num_threads=2"]) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) > 0  # equal steps
    orders = []
    for epoch in (0, 1):
        owned = []
        for ld in ranks:
            reads.clear()
            ld.set_epoch(epoch)
            labels = torch.cat([y for _, y in ld])
            mine = np.concatenate(reads)
            assert len(mine) == len(labels) == len(ld) * 8  # what was read is what came out, in whichever order
            assert sorted(labels.tolist()) == sorted(pack.labels(mine).tolist())
            owned.append((mine.min(), mine.max(), set(pack.shards_of(mine).tolist())))
            orders.append(mine)
            assert f"shards={len(owned[-1][2])} of {len(pack.shards)}" in ld.describe()  # opened: the ones it reads
        assert owned[0][1] < owned[1][0]  # each rank reads its own range of the pack (shards split where it ends)
        assert len(owned[0][2] & owned[1][2]) <= 1 and len(owned[0][2]) < 12
        seen = np.concatenate(orders[-2:])
        assert len(seen) == len(set(seen.tolist())) and len(seen) >= 186 - 2 * 8 * 2  # each once; at most a step per lane left
    assert not np.array_equal(orders[0], orders[2])  # another order each epoch
    ranks[1].set_epoch(1)
    full = [y.tolist() for _, y in ranks[1]]
    assert ranks[1].skip_next(3) is True and [y.tolist() for _, y in ranks[1]] == full[3:]  # resumed, unread
    held = [loader(folder, packs["jpeg-shards"], Dist(r, 2, r, 2), train=False) for r in range(2)]
    assert sorted(torch.cat([y for ld in held for _, y in ld]).tolist()) == sorted(pack.labels(pack.indices(1)).tolist())


@pytest.mark.parametrize("before, after", [(2, 1), (1, 4), (4, 2)])
def test_a_resume_on_another_number_of_ranks_reads_each_sample_once(packs, folder, before, after):
    """Ranks x batch 4 x 2 = 8 samples a step before, in steps of the new run's global batch after."""
    pack = PackSet(packs["raw-shards"])
    starts = pack.starts[pack.starts < len(pack.indices(0))]

    def plans(world, batch):
        return [LanePlan(len(pack.indices(0)), starts, world, r, batch, 0, 0, True) for r in range(world)]

    first, batch_before = plans(before, 8 // before), 8 // before
    done_steps = 5
    consumed = np.concatenate([b for p in first for b in p.epoch(3)[:done_steps]])
    second, batch_after = plans(after, 8 // after), 8 // after
    skip = done_steps * batch_before * before // (batch_after * after)  # the loop's step_in_epoch
    rest = np.concatenate([b for p in second for b in p.epoch(3, skip)])
    seen = np.concatenate([consumed, rest])
    assert len(seen) == len(set(seen.tolist()))  # nothing twice
    assert len(seen) >= len(pack.indices(0)) - first[0].lanes * 2  # nothing left out but each lane's short tail
    assert {p.lanes for p in first + second} == {first[0].lanes} and first[0].lanes > 1


def test_a_shuffle_buffer_reads_shard_pieces_front_to_back(packs, folder):
    n = len(PackSet(packs["raw-shards"]).indices(0))
    plan = LanePlan(n, np.array([0, 96]), 1, 0, 8, 0, 16, True)  # 8 lanes, 2 samples each in the buffer
    batches = plan.epoch(0)
    seen = np.concatenate(batches)
    assert len(seen) == len(set(seen.tolist())) == plan.per_rank()
    lane0 = np.array([b[0] for b in batches])  # the first lane's sample of each step, read front to back:
    assert lane0.max() < plan.bounds[1][0] and not np.array_equal(lane0, np.sort(lane0))  # shuffled a little,
    assert np.abs(lane0 - np.arange(len(lane0))).mean() <= 3  # never far from where the read is
    buffered = loader(folder, packs["raw-shards"], extra=["data.shuffle_buffer=64"])
    assert "shuffle_buffer=64" in buffered.describe()


def test_bad_codec_settings_are_one_clear_line(packs, folder, capsys):
    with pytest.raises(ConfigError, match="data.decoder=gpu decodes JPEGs on the GPU, but training runs on cpu"):
        loader(folder, packs["jpeg"], extra=["data.decoder=gpu"])
    with pytest.raises(ConfigError, match="data.codec=jpeg but the pack .* stores raw images"):
        loader(folder, packs["raw"], extra=["data.codec=jpeg"])
    with pytest.raises(ConfigError, match="data.quality=0 must be an integer in 1..100"):
        make_settings(["data=mmap", "data.quality=0"])
    with pytest.raises(ConfigError, match="data.codec='png' is not valid"):
        make_settings(["data=mmap", "data.codec=png"])
    assert pack_main([str(folder), str(packs["raw"]), "--shard-size", "2XB"]) == 2
    assert "--shard-size 2XB: give bytes with a unit, e.g. 2GB" in capsys.readouterr().err
    small = packs["raw"].parent / "small-shards"  # 64x64x3 = 12.3KB an image: 100KB holds 8, a chunk is 16
    assert pack_main([str(folder), str(small), "--size", "64", "--shard-size", "100KB", "--chunk-images", "16",
                      "--no-progress"]) == 2
    assert ("--shard-size 100KB holds 8 images of about 12.3KB, fewer than one chunk of 16 (--chunk-images): raise "
            "--shard-size to at least 197KB, or lower --chunk-images to 8") in capsys.readouterr().err
    assert not small.exists()  # refused before anything was written


@pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU decode needs CUDA (nvJPEG); CPU decode is tested above")
def test_gpu_decode_runs_on_the_device_and_matches_cpu_decode(packs, folder):
    pack = PackSet(packs["jpeg"])
    device = torch.device("cuda")
    gpu, _ = PackImages(pack, Decoder("gpu", device, pack.stored, 1, False)).read_batch(np.arange(64))
    cpu, _ = PackImages(pack, Decoder("cpu", device, pack.stored, 2, False)).read_batch(np.arange(64))
    assert gpu.is_cuda and (gpu.cpu().float() - cpu.float()).abs().mean() <= 1
