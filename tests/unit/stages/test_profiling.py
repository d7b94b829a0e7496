"""profile=on: torch.profiler traces in the run folder, and the timing flagged as distorted."""
from __future__ import annotations

import json

import pytest

from conftest import make_settings, run_in_process
from fastpipe.errors import ConfigError

RUN = ["dataset.num_images=200", "dataset.image_size=16", "train.batch_size=16", "train.max_steps=6",
       "measure.warmup_steps=2", "measure.window=3", "runtime.progress=false", "data.num_workers=0"]


def test_profile_on_writes_a_trace_and_warns_about_timing(tmp_path):
    metrics = run_in_process(tmp_path, RUN + ["profile=on", "profile.wait=1", "profile.warmup=1", "profile.active=2"])
    assert metrics["status"] == "ok"
    traces = list((tmp_path / "profile").glob("rank0.*.pt.trace.json"))
    assert len(traces) == 1  # one active span (repeat=1)
    events = json.loads(traces[0].read_text())["traceEvents"]
    assert any(e.get("name", "").startswith("aten::conv") for e in events)  # the model's ops are in it
    assert any("profile=on: steps 3..4" in w and "distorted" in w for w in metrics["warnings"])


def test_profile_is_off_by_default_and_validated(tmp_path):
    assert make_settings(RUN).profile.name == "off"
    with pytest.raises(ConfigError, match="profile.active"):
        make_settings(RUN + ["profile=on", "profile.active=0"])


def test_only_rank_0_profiles(tmp_path):
    """Under ddp the run folder is rank 0's: the other ranks run unprofiled (one trace per run)."""
    import torch

    from fastpipe.stages.profiling import NoProfiler, build_profiler

    cfg = make_settings(RUN + ["profile=on"]).profile
    assert isinstance(build_profiler(cfg, tmp_path, torch.device("cpu"), is_main=False), NoProfiler)
    with pytest.warns(UserWarning, match="profile=on"):
        assert not isinstance(build_profiler(cfg, tmp_path, torch.device("cpu"), is_main=True), NoProfiler)
