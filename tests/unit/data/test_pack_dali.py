"""JPEG packs decoded by DALI (data=mmap data.decoder=dali) on DALI's CPU pipeline: the pixels, order and
epochs of data.decoder=cpu, each rank's lanes, the held-out subset, a training run, and the refusals."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from conftest import cpu_runtime, make_settings, needs_dali, run_in_process

from fastpipe.data import build_loader
from fastpipe.data.pack.jpeg import encode
from fastpipe.data.pack.reader import PackReader
from fastpipe.data.pack.shards import PackSet
from fastpipe.data.splits import build_dataset
from fastpipe.errors import ConfigError, DataError, EnvironmentProblem
from fastpipe.runtime import Dist

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"),  # torch on read-only numpy views
              pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")]
GREY_LEVEL = 1 / (0.225 * 255)  # one grey level in normalised units (the largest ImageNet std)


def loader(folder, path, decoder, train=True, dist=Dist(), subset=None, extra=(), device="cpu"):
    s = make_settings(["data=mmap", f"data.path={path}", "dataset=imagefolder", f"dataset.root={folder}",
                       "dataset.image_size=24", "dataset.augment=true", f"data.decoder={decoder}",
                       "runtime.progress=false", *extra])
    runtime = dataclasses.replace(cpu_runtime(dist), device=torch.device(device))
    splits = build_dataset(s.dataset, runtime, "imagefolder")
    return build_loader(s.data, splits, runtime, 8, s.seed, train, False, subset=subset)


def same_batches(a, b) -> None:
    """Equal labels, and pixels within JPEG decoders' rounding, batch by batch."""
    assert len(a) == len(b) > 0
    for (x, y), (u, v) in zip(a, b):
        assert torch.equal(y, v) and x.shape == u.shape and x.dtype == u.dtype == torch.float32
        assert float((x - u).abs().mean()) <= GREY_LEVEL


@needs_dali
def test_dali_gives_decoder_cpus_batches_epoch_by_epoch_also_after_an_epoch_left_early(packs, folder):
    cpu, dali = loader(folder, packs["jpeg"], "cpu"), loader(folder, packs["jpeg"], "dali")
    words = dali.describe()
    assert "codec=jpeg  decoder=dali (cpu, num_threads=" in words and "prefetch_queue_depth=4" in words
    orders = []
    for epoch in (0, 1, 2):
        if epoch == 1:  # a first-batch check or max_steps leaves an epoch after one batch
            dali.set_epoch(epoch)
            next(iter(dali))
        cpu.set_epoch(epoch)
        dali.set_epoch(epoch)  # the crops restart from (seed, epoch)
        a, b = list(cpu), list(dali)
        same_batches(a, b)  # the same samples, in the same order, cropped and flipped alike
        assert len(b) == len(dali) == 38 // 8
        orders.append(torch.cat([y for _, y in b]).tolist())
    assert orders[0] != orders[1] != orders[2]  # a new order each epoch


@needs_dali
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the mixed decoder needs CUDA (the CPU pipeline: above)")
def test_the_mixed_decoder_on_cuda_gives_decoder_cpus_batches(packs, folder):
    """The hardware decoder or nvJPEG against libjpeg-turbo, each batch handed over on the preparing stream."""
    cpu, dali = (loader(folder, packs["jpeg"], d, device="cuda", extra=["data.hw_decoder_load=0.5"])
                 for d in ("cpu", "dali"))
    assert "decoder=dali (mixed, hw_decoder_load=0.5, " in dali.describe()
    for epoch in (0, 1):
        next(iter(dali))  # an epoch left early, then read whole
        cpu.set_epoch(epoch)
        dali.set_epoch(epoch)
        batches = list(dali)
        assert all(x.is_cuda and y.is_cuda for x, y in batches)
        same_batches(list(cpu), batches)


@needs_dali
def test_each_rank_decodes_its_own_lanes_of_a_sharded_pack(packs, folder):
    seen = []
    for rank in range(2):
        dist = Dist(rank, 2, rank, 2)
        cpu = loader(folder, packs["jpeg-shards"], "cpu", dist=dist)
        dali = loader(folder, packs["jpeg-shards"], "dali", dist=dist)
        assert "shards=" in dali.describe() and len(cpu) == len(dali)
        for epoch in (0, 1):
            cpu.set_epoch(epoch)
            dali.set_epoch(epoch)
            batches = list(dali)
            same_batches(list(cpu), batches)
            seen.append(sum(len(y) for _, y in batches))
    assert seen[0] == seen[2] > 0  # equal steps on both ranks


@needs_dali
def test_the_held_out_split_and_a_subset_of_it_are_read_once_in_order(packs, folder):
    val = PackSet(packs["jpeg"])
    labels = val.labels(val.indices(1))
    whole = list(loader(folder, packs["jpeg"], "dali", train=False))
    assert [len(y) for _, y in whole] == [8, 2]  # the short last batch is kept
    assert torch.cat([y for _, y in whole]).tolist() == labels.tolist()
    subset = [9, 2, 5, 0, 3, 7, 1, 8, 4]  # a seeded random order (data/held_out_batches.py): batches take it in turn
    picked = list(loader(folder, packs["jpeg"], "dali", train=False, subset=subset))
    same_batches(list(loader(folder, packs["jpeg"], "cpu", train=False, subset=subset)), picked)
    in_turn = sorted(subset[:8]) + subset[8:]  # each batch the next positions, read in ascending order
    assert [len(y) for _, y in picked] == [8, 1] and torch.cat([y for _, y in picked]).tolist() == labels[in_turn].tolist()
    assert all(x.shape[1:] == (3, 24, 24) for x, _ in picked)  # resized, not augmented


@needs_dali
def test_a_run_trains_from_a_jpeg_pack_through_dali(packs, folder, tmp_path):
    m = run_in_process(tmp_path, ["data=mmap", f"data.path={packs['jpeg']}", "data.decoder=dali", "device=cpu",
                                  "dataset=imagefolder", f"dataset.root={folder}", "dataset.image_size=24",
                                  "model=tiny_cnn", "train.batch_size=8", "train.epochs=2", "measure.warmup_steps=1",
                                  "measure.window=2", "runtime.progress=false"])
    graph = (tmp_path / "graph.txt").read_text()
    assert m["status"] == "ok" and m["steps"] == 2 * (38 // 8) and 0 <= m["val_metrics"]["accuracy"] <= 1
    assert "codec=jpeg  decoder=dali (cpu, num_threads=" in graph


def damaged(pack, out, image: int, replace) -> str:
    """A copy of ``pack`` whose JPEG ``image`` (a training image) is ``replace(its bytes)``, as long."""
    reader, data = PackReader(pack), bytearray(pack.read_bytes())
    start, end = (reader.data_offset + int(reader.offsets[i]) for i in (image, image + 1))
    assert reader.split[image] == 0
    data[start:end] = replace(bytes(data[start:end]))
    out.write_bytes(bytes(data))
    return str(out)


@needs_dali
def test_a_jpeg_dali_cannot_decode_or_of_another_size_is_one_line_naming_the_pack(packs, folder, tmp_path):
    half = lambda jpeg: jpeg[:len(jpeg) // 2] + (b"\xff\x01" * len(jpeg))[:len(jpeg) - len(jpeg) // 2]  # noqa: E731
    bad = damaged(packs["jpeg"], tmp_path / "bad.fppack", 3, half)  # markers JPEG does not know
    with pytest.raises(DataError) as caught:
        list(loader(folder, bad, "dali", extra=["data.verify=false", "data.drop_last=false"]))
    assert str(caught.value).startswith(f"DALI's decoder fails on a JPEG of pack {bad} (DALI: ")
    assert str(caught.value).endswith(f"check the pack with `python -m fastpipe.pack --verify {bad}` and repack it")
    small = encode(np.zeros((16, 16, 3), np.uint8), 90)
    other = damaged(packs["jpeg"], tmp_path / "other.fppack", 5, lambda jpeg: small.ljust(len(jpeg), b"\0"))
    with pytest.raises(DataError, match=rf"a JPEG in pack {other} decodes to \(16, 16\), not the stored \(32, 32\)"):
        list(loader(folder, other, "dali", extra=["data.verify=false", "data.drop_last=false"]))


def test_a_raw_pack_has_nothing_to_decode_whatever_data_decoder_says(packs, folder):
    dali, auto = loader(folder, packs["raw"], "dali"), loader(folder, packs["raw"], "auto")
    assert "codec=raw  threads=" in dali.describe() and "decoder=" not in dali.describe()
    assert all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(dali, auto))
    with pytest.raises(ConfigError, match=r"data.hw_decoder_load=1.5 must lie in \[0, 1\]"):
        make_settings(["data=mmap", "data.hw_decoder_load=1.5"])
    with pytest.raises(ConfigError, match="data.decoder='nvjpeg' is not valid; use one of auto, gpu, cpu, dali"):
        make_settings(["data=mmap", "data.decoder=nvjpeg"])


def test_missing_dali_is_one_line_naming_the_extra(packs, folder, without_dali, tmp_path):
    with pytest.raises(EnvironmentProblem) as caught:
        loader(folder, packs["jpeg"], "dali")
    message = str(caught.value)
    assert message.startswith("data.decoder=dali needs NVIDIA DALI, which cannot be imported here")
    assert 'pip install "fastpipe[dali]"' in message
    assert message.endswith("or decode with torchvision: data.decoder=auto")
    with pytest.raises(EnvironmentProblem):  # a whole run: failed metrics.json with the same reason
        run_in_process(tmp_path, ["data=mmap", f"data.path={packs['jpeg']}", "data.decoder=dali", "device=cpu",
                                  "dataset=imagefolder", f"dataset.root={folder}", "dataset.image_size=24",
                                  "model=tiny_cnn", "train.batch_size=8", "runtime.progress=false"])
    assert json.loads((tmp_path / "metrics.json").read_text())["reason"] == message
    assert "\n" not in message
