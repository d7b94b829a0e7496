"""data=mmap's reader threads pin host memory on the run's GPU: each thread starts with
torch.cuda.set_device, which refuses a device without an index; a bare ``cuda`` (a benchmark's, a
project's ``device=cuda``) means the current GPU."""
from __future__ import annotations

import torch

from fastpipe.data.mmap import reader_gpu


def test_a_bare_cuda_device_binds_the_readers_to_the_current_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert reader_gpu(torch.device("cuda")) == torch.device("cuda", 3)
    assert reader_gpu(torch.device("cuda", 1)) == torch.device("cuda", 1)  # a rank's own GPU stays
