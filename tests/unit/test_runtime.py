"""Runtime set-up: the one place that reads the environment sets what must be set before CUDA starts."""
from __future__ import annotations

from conftest import make_settings


def test_cuda_alloc_conf_is_exported_before_cuda(monkeypatch):
    import os

    from fastpipe.runtime import setup_runtime

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    setup_runtime(make_settings(["runtime.cuda_alloc_conf=expandable_segments:True"]))
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
