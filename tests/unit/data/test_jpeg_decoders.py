"""The JPEG decoders of data=mmap: gpu+cpu shares one batch between nvJPEG and CPU threads, every image
decoded once and in its place; the decoder choices' settings and errors."""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from conftest import make_settings

from fastpipe.data import jpeg
from fastpipe.data.jpeg import Decoder
from fastpipe.errors import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")


@pytest.fixture(scope="module")
def files():
    """150 distinct 24x32 JPEG files (a gradient whose offset is the image's number)."""
    ramp = np.add.outer(np.arange(24), np.arange(32))
    images = [np.stack([(ramp * 3 + i) % 256, (ramp + 2 * i) % 256, np.full_like(ramp, i)], -1).astype(np.uint8)
              for i in range(150)]
    return [torch.frombuffer(bytearray(jpeg.encode(im, 95)), dtype=torch.uint8) for im in images]


def test_gpu_and_cpu_sides_share_a_batch_and_each_image_lands_in_its_place(files, monkeypatch):
    """The "GPU" side runs on the CPU device here (torchvision decodes a list there too), slowed down so
    the threads take chunks as well: the assembled batch equals a plain CPU decode, image for image."""
    expected = Decoder("cpu", torch.device("cpu"), (24, 32), 2, False)(files)
    plain = jpeg._decode

    def slow_batched(batch, device):
        if device is not None:
            time.sleep(0.02)
        return plain(batch, device)

    monkeypatch.setattr(jpeg, "_decode", slow_batched)
    both = Decoder("gpu+cpu", torch.device("cpu"), (24, 32), 2, False)
    for _ in range(2):  # the pool and the counts carry over batches
        assert torch.equal(both(files), expected)
    assert both.counts["gpu"] > 0 and both.counts["cpu"] > 0
    assert both.counts["gpu"] + both.counts["cpu"] == 2 * len(files)


def test_a_wrong_sized_jpeg_is_named_on_either_side(files):
    for where in ("cpu", "gpu+cpu"):
        with pytest.raises(Exception, match=r"decodes to \(24, 32\), not the stored \(16, 16\); repack it"):
            Decoder(where, torch.device("cpu"), (16, 16), 2, False)(files[:8])


def test_decoder_choices_and_their_threads():
    cfg = make_settings(["data=mmap", "data.decoder=gpu+cpu"]).data
    assert cfg.decoder_for("cuda") == "gpu+cpu"
    assert (cfg.decoding_threads(16, "cuda"), cfg.decoding_threads(16, "cpu"), cfg.decoding_threads(1, "cuda")) == (15, 16, 1)
    assert (cfg.decoding_threads(16, "cuda", "gpu+cpu"), cfg.decoding_threads(1, "cuda", "gpu+cpu")) == (8, 1)
    assert make_settings(["data=mmap", "data.decode_threads=3"]).data.decoding_threads(16, "cuda") == 3
    with pytest.raises(ConfigError, match="data.decoder=gpu\\+cpu decodes JPEGs on the GPU, but training runs on cpu; "
                                          "use data.decoder=auto or data.decoder=cpu"):
        cfg.decoder_for("cpu")
    with pytest.raises(ConfigError, match="data.decoder='nvjpeg' is not valid"):
        make_settings(["data=mmap", "data.decoder=nvjpeg"])
