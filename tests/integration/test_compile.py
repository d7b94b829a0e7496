"""torch.compile for real (Inductor): compiled runs, fp32 and amp, train with a finite loss."""
from __future__ import annotations

import math

import pytest

from conftest import TINY, run_in_process


@pytest.mark.parametrize("overrides", [["compile=default"], ["precision=amp", "compile=default"]])
def test_amp_and_compile_train_with_finite_loss(tmp_path, overrides):
    m = run_in_process(tmp_path, TINY + overrides)
    assert m["status"] == "ok" and math.isfinite(m["final_loss"]) and m["compile_fallback"] is None
    assert "bf16 autocast" in (tmp_path / "graph.txt").read_text() or "precision=amp" not in overrides
