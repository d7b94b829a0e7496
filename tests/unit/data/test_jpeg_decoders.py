"""data=mmap's GPU JPEG decoder: batches that reader threads ask for while a call runs are decoded
together in the next call, each thread getting exactly its own images back (or the call's error)."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
import torchvision.io

from fastpipe.data import jpeg
from fastpipe.data.jpeg import Decoder
from fastpipe.errors import DataError

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")


@pytest.fixture(scope="module")
def files():
    """96 distinct 24x32 JPEG files (a gradient whose offset is the image's number)."""
    ramp = np.add.outer(np.arange(24), np.arange(32))
    images = [np.stack([(ramp * 3 + i) % 256, (ramp + 2 * i) % 256, np.full_like(ramp, i)], -1).astype(np.uint8)
              for i in range(96)]
    return [torch.frombuffer(bytearray(jpeg.encode(im, 95)), dtype=torch.uint8) for im in images]


def slowed(monkeypatch, seconds=0.05):
    """torchvision's list decode (what nvJPEG runs), slowed: requests pile up while a call runs. The
    "GPU" is the CPU device here; torchvision decodes a list there too."""
    plain, calls = torchvision.io.decode_jpeg, []

    def decode(batch, **kw):
        if isinstance(batch, list):
            calls.append(len(batch))
            time.sleep(seconds)
        return plain(batch, **kw)

    monkeypatch.setattr(torchvision.io, "decode_jpeg", decode)
    return calls


def test_batches_asked_for_during_a_call_are_decoded_together_each_thread_getting_its_own(files, monkeypatch):
    expected = Decoder("cpu", torch.device("cpu"), (24, 32), 2, False)(files)
    calls = slowed(monkeypatch)
    decoder, results = Decoder("gpu", torch.device("cpu"), (24, 32), 1, False), {}
    batches = {t: list(range(t * 12, t * 12 + 12)) for t in range(8)}  # 8 reader threads, 12 images each

    def reader(t):
        results[t] = decoder([files[i] for i in batches[t]])

    threads = [threading.Thread(target=reader, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for t, idx in batches.items():
        assert torch.equal(results[t], expected[idx]), f"thread {t} got another thread's images"
    assert sum(calls) == 96 and len(calls) < 8 and max(calls) > 12  # fewer, larger calls
    assert decoder.stats() == {"images": 96, "calls": len(calls)}


def test_a_call_holds_at_most_max_images_and_a_wrong_size_is_named(files, monkeypatch):
    monkeypatch.setattr(jpeg, "MAX_IMAGES_PER_CALL", 24)
    calls = slowed(monkeypatch)
    decoder, errors, got = Decoder("gpu", torch.device("cpu"), (24, 32), 1, False), [], []

    def reader(batch):
        try:
            got.append(decoder(batch))
        except DataError as exc:
            errors.append(str(exc))

    wrong = Decoder("gpu", torch.device("cpu"), (16, 16), 1, False)
    with pytest.raises(DataError, match=r"decodes to \(24, 32\), not the stored \(16, 16\); repack it"):
        wrong(files[:4])
    threads = [threading.Thread(target=reader, args=(files[t * 12:t * 12 + 12],)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and len(got) == 6 and max(calls) <= 24
