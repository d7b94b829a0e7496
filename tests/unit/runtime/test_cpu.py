"""fastpipe.machine.cpu_bf16: whether the CPU computes bf16 natively, as torch and the kernel's flags say."""
import platform

import pytest
import torch

from fastpipe import machine as cpu


def test_native_bf16_is_what_the_cpu_flags_say(monkeypatch):
    flags = cpu._cpuinfo_words()
    if flags is None or platform.machine() != "x86_64":
        pytest.skip("reads the flags of /proc/cpuinfo on an x86 Linux machine")
    expected = bool({"avx512_bf16", "amx_bf16"} & flags)
    assert cpu.cpu_bf16()["native"] is expected
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)  # a torch without the helper
    from_flags = cpu.cpu_bf16()
    assert from_flags["source"] == "/proc/cpuinfo" and from_flags["native"] is expected
    assert from_flags["looked_for"] == ["AVX512-BF16", "AMX-BF16"]


def test_an_arm_cpu_is_read_from_its_features_line(monkeypatch):
    monkeypatch.setattr(cpu.platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(cpu, "_cpuinfo_words", lambda: {"fp", "asimd", "bf16"})
    assert cpu.cpu_bf16() == {"native": True, "isa": ["BF16"], "looked_for": ["BF16"], "source": "/proc/cpuinfo"}
    monkeypatch.setattr(cpu, "_cpuinfo_words", lambda: {"fp", "asimd"})
    assert cpu.cpu_bf16()["native"] is False
    monkeypatch.setattr(cpu.platform, "machine", lambda: "riscv64")
    assert cpu.cpu_bf16()["native"] is None  # cannot be told: no claim either way
