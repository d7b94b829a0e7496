"""data=dali on CPU-only DALI pipelines: training, batch format, sharding, and the clear errors."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from conftest import cpu_runtime, make_settings, needs_dali, run_in_process, shapes_splits

from fastpipe.config import DaliLoaderConfig
from fastpipe.data import build_loader
from fastpipe.data.device import MEAN, STD
from fastpipe.data.images import ImageFiles
from fastpipe.errors import ConfigError, EnvironmentProblem
from fastpipe.runtime import Dist

CPU = torch.device("cpu")
CFG = DaliLoaderConfig(num_threads=1)


@pytest.fixture(scope="module")
def spec():
    """120 shapes of 40x30 pixels (so resizing to 24x24 really happens)."""
    return shapes_splits(image_size=24, num_images=120, source_size=[40, 30])


def indexed(spec, augment=False):
    """The same files, each labelled with its own index: a batch says which samples it holds."""
    n_train, n_val = len(spec.train), len(spec.val)
    classes = [str(i) for i in range(n_train + n_val)]
    return dataclasses.replace(spec, train=ImageFiles(spec.train.files, range(n_train), classes, 24, augment),
                               val=ImageFiles(spec.val.files, range(n_val), classes, 24))


def loader(spec, train, batch=8, dist=Dist(), channels_last=False, cfg=CFG):
    return build_loader(cfg, spec, cpu_runtime(dist), batch, 0, train=train, channels_last=channels_last)


@needs_dali
@pytest.mark.parametrize("channels_last", [False, True])
def test_augment_off_batches_are_normalised_nchw_and_repeatable(spec, channels_last):
    dl = loader(indexed(spec), train=True, channels_last=channels_last)
    assert len(dl) == len(spec.train) // 8 and "dali  decode=cpu" in dl.describe()
    epochs = []
    for epoch in range(2):
        dl.set_epoch(epoch)
        batches = list(dl)
        assert len(batches) == len(dl)
        epochs.append({int(i): img for x, y in batches for i, img in zip(y, x)})
    images, labels = batches[0]
    assert images.shape == (8, 3, 24, 24) and images.dtype == torch.float32 and images.device == CPU
    assert labels.shape == (8,) and labels.dtype == torch.int64
    assert images.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    low = min((0 - m) / s for m, s in zip(MEAN, STD))
    high = max((1 - m) / s for m, s in zip(MEAN, STD))
    assert low - 1e-4 <= float(images.min()) and float(images.max()) <= high + 1e-4
    assert list(epochs[0]) != list(epochs[1]), "training order is reshuffled each epoch"
    common = set(epochs[0]) & set(epochs[1])
    assert all(torch.equal(epochs[0][i], epochs[1][i]) for i in common), "no augmentation: same pixels"


def test_gpu_decoder_asks_fancy_upsampling_only_for_whole_images():
    from fastpipe.data.dali import decode_options

    cfg = DaliLoaderConfig(hw_decoder_load=0.9)
    whole, crop = decode_options("mixed", cfg, roi=False, rgb="RGB"), decode_options("mixed", cfg, roi=True, rgb="RGB")
    assert whole == {"device": "mixed", "output_type": "RGB", "adjust_orientation": False, "hw_decoder_load": 0.9,
                     "jpeg_fancy_upsampling": True}
    assert crop["jpeg_fancy_upsampling"] is False  # nvJPEG < 13.2: no fancy upsampling in ROI decodes
    assert decode_options("mixed", dataclasses.replace(cfg, jpeg_fancy_upsampling=False), False, "RGB")[
        "jpeg_fancy_upsampling"] is False
    assert decode_options("cpu", cfg, roi=True, rgb="RGB") == {"device": "cpu", "output_type": "RGB",
                                                               "adjust_orientation": False}


@needs_dali
def test_classic_executor_delivers_the_same_batches(spec):
    """data.exec_dynamic=false (copies into torch tensors) yields what the dynamic executor hands over."""
    batches = {}
    for dynamic in (True, False):
        dl = loader(indexed(spec, augment=True), train=True, cfg=dataclasses.replace(CFG, exec_dynamic=dynamic))
        assert f"exec_dynamic={dynamic}" in dl.describe() and dl.iterator._pipes[0].exec_dynamic == dynamic
        batches[dynamic] = list(dl)
    assert len(batches[True]) == len(batches[False]) > 0
    for (x1, y1), (x2, y2) in zip(batches[True], batches[False]):
        assert torch.equal(y1, y2) and torch.equal(x1, x2)  # same seed: same order, crops and pixels


@needs_dali
def test_augment_on_crops_and_flips_differently_each_epoch(spec):
    dl = loader(indexed(spec, augment=True), train=True)
    seen = []
    for epoch in range(2):
        dl.set_epoch(epoch)
        seen.append({int(i): img for x, y in dl for i, img in zip(y, x)})
        assert all(img.shape == (3, 24, 24) and img.dtype == torch.float32 for img in seen[-1].values())
    common = set(seen[0]) & set(seen[1])
    differ = sum(not torch.allclose(seen[0][i], seen[1][i]) for i in common)
    assert differ >= 0.9 * len(common), "random-resized-crop + flip give new pixels each epoch"


@needs_dali
def test_held_out_split_is_read_exactly_once_over_ranks(spec):
    s = indexed(spec)
    world = 3  # 27 held-out images do not split evenly into batches of 4
    got = []
    for rank in range(world):
        dl = loader(s, train=False, batch=4, dist=Dist(rank, world, rank, world))
        first, second = ([int(i) for _, y in dl for i in y] for _ in range(2))
        assert first == second  # every epoch: the same shard, in file order
        got += first
    assert sorted(got) == list(range(len(s.val)))


@needs_dali
def test_training_shards_are_disjoint_and_equally_long(spec):
    s, world = indexed(spec), 2
    loaders = [loader(s, train=True, batch=8, dist=Dist(r, world, r, world)) for r in range(world)]
    assert len({len(dl) for dl in loaders}) == 1  # DDP: every rank runs the same number of steps
    per_rank = [[int(i) for _, y in dl for i in y] for dl in loaders]
    assert all(len(p) == len(loaders[0]) * 8 for p in per_rank)
    assert not set(per_rank[0]) & set(per_rank[1]) and len(set(per_rank[0])) == len(per_rank[0])


@needs_dali
def test_abandoned_epoch_is_finished_before_the_next(spec):
    dl = loader(indexed(spec), train=True)
    it = iter(dl)
    next(it)  # the loop stops early when grad_accum leaves batches over
    assert len(list(dl)) == len(dl)


def test_missing_dali_names_the_extra(spec, without_dali, tmp_path):
    with pytest.raises(EnvironmentProblem) as exc:
        loader(spec, train=True)
    message = str(exc.value)
    assert 'pip install "fastpipe[dali]"' in message and "nvidia-dali-cuda130" in message
    assert "nvidia-dali-cuda120" in message and "data=default" in message
    with pytest.raises(EnvironmentProblem):  # a whole run: failed metrics.json with the same reason
        run_in_process(tmp_path, ["data=dali", "dataset.num_images=120", "runtime.progress=false"])
    assert 'pip install "fastpipe[dali]"' in json.loads((tmp_path / "metrics.json").read_text())["reason"]


@needs_dali
def test_synthetic_dataset_and_gpu_decoder_on_cpu_are_clear_errors(spec):

    with pytest.raises(ConfigError, match="data=dali cannot read dataset=synthetic: it is generated on the device"):
        make_settings(["data=dali", "dataset=synthetic", "dataset.num_images=64"])
    with pytest.raises(ConfigError, match="data=dali cannot read dataset=tokens: it is a token stream"):
        make_settings(["data=dali", "dataset=tokens", "task=lm", "model=gpt_tiny"])
    with pytest.raises(ConfigError, match="data.decoder=mixed decodes on the GPU, but training runs on cpu"):
        loader(spec, train=True, cfg=DaliLoaderConfig(decoder="mixed"))


@needs_dali
def test_the_exif_orientation_is_ignored_as_data_default_ignores_it(tmp_path):
    """A phone photo's EXIF orientation tag (6: rotate 90 degrees to display): PIL's decode, and so
    data=default and the packs, keep the stored pixels; DALI must train on those same pixels."""
    import numpy as np
    from PIL import Image

    pixels = np.zeros((40, 80, 3), np.uint8)
    pixels[:, 40:] = 255  # stored: dark left half, bright right half
    exif = Image.Exif()
    exif[0x0112] = 6
    files = []
    for i in range(16):
        files.append(str(tmp_path / f"p{i}.jpg"))
        Image.fromarray(pixels).save(files[-1], quality=95, exif=exif)
    images = ImageFiles(files, list(range(16)), [str(i) for i in range(16)], 24)
    reference = images[0][0].float()  # data=default's decode and resize
    assert reference[:, :, :12].mean() < 60 < 200 < reference[:, :, 12:].mean()
    spec = dataclasses.replace(shapes_splits(image_size=24, num_images=120), train=images, val=images)
    x, _ = next(iter(loader(spec, train=False, batch=4)))
    left, right, top, bottom = x[0, :, :, :12].mean(), x[0, :, :, 12:].mean(), x[0, :, :12].mean(), x[0, :, 12:].mean()
    assert left < -1 < 1 < right and abs(top - bottom) < 0.1  # columns, not rows: not rotated
