"""precision=amp on a CPU that computes bf16 only in emulation (no AVX512-BF16 / AMX, no Arm BF16):
many times slower than fp32, so the run says so and names precision=fp32 (a warning in metrics.json
and the summary, a note on graph.txt's precision line). The detection itself, the doctor's too:
tests/unit/runtime/test_cpu.py."""
from __future__ import annotations

import warnings

import pytest
import torch

from fastpipe import machine
from fastpipe.config.precision import PrecisionConfig
from fastpipe.errors import FastpipeWarning
from fastpipe.stages.precision import build_amp

NONE = {"native": False, "isa": [], "looked_for": ["AVX512-BF16", "AMX-BF16"], "source": "torch.cpu"}


@pytest.mark.parametrize("native", [False, True, None])
def test_amp_on_a_cpu_without_native_bf16_names_fp32(monkeypatch, native):
    monkeypatch.setattr(machine, "cpu_bf16", lambda: {**NONE, "native": native})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        amp = build_amp(PrecisionConfig(name="amp"), torch.device("cpu"))
    said = [str(w.message) for w in caught if issubclass(w.category, FastpipeWarning)]
    if native is False:  # None: cannot be told here, no claim either way
        assert said == ["precision=amp trains in bf16, which this CPU computes only in emulation (it has no "
                        "AVX512-BF16 or AMX-BF16), many times slower than fp32; use precision=fp32 on this machine"]
        assert amp.describe().endswith("(emulated on this CPU: precision=fp32 is faster here)")
    else:
        assert said == [] and "emulated" not in amp.describe()
