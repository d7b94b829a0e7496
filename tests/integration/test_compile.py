"""torch.compile for real (Inductor): compiled runs, fp32 and amp, train with a finite loss. The runs are
the compiled jobs of the grid sweep (conftest's grid_sweep), which its report's tests read too."""
from __future__ import annotations

import json
import math

import pytest


def compiled_job(sweep_dir, precision):
    """(folder, metrics) of the sweep's compile=default job at ``precision``."""
    (found,) = [(p.parent, m) for p in sweep_dir.glob("*/metrics.json") for m in [json.loads(p.read_text())]
                if (m["choices"]["compile"], m["choices"]["precision"]) == ("default", precision)]
    return found


@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_amp_and_compile_train_with_finite_loss(grid_sweep, precision):
    job, m = compiled_job(grid_sweep[0], precision)
    assert m["status"] == "ok" and math.isfinite(m["final_loss"]) and m["compile_fallback"] is None
    assert "bf16 autocast" in (job / "graph.txt").read_text() or precision != "amp"
