"""The precision group: amp trains in bf16 autocast; under FSDP precision is the sharding policy."""
from __future__ import annotations

import math

import torch

from conftest import TINY, run_in_process


def test_amp_trains_with_finite_loss_in_bf16_autocast(tmp_path):
    m = run_in_process(tmp_path, TINY + ["precision=amp"])
    assert m["status"] == "ok" and math.isfinite(m["final_loss"]) and m["compile_fallback"] is None
    assert "bf16 autocast" in (tmp_path / "graph.txt").read_text()


def test_fsdp_precision_is_the_policy_not_autocast():
    from fastpipe.config import PrecisionConfig
    from fastpipe.stages.fsdp import mixed_precision
    from fastpipe.stages.precision import build_amp

    p = build_amp(PrecisionConfig(name="amp"), torch.device("cpu"), by_fsdp=True)
    assert p.dtype is torch.bfloat16 and "MixedPrecisionPolicy" in p.describe()
    with p.autocast():
        assert not torch.is_autocast_enabled("cpu")
    policy = mixed_precision(p.dtype)
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
    assert mixed_precision(None) is None
