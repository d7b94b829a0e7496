"""What this machine's CPU can do that fastpipe's choices depend on (read from torch or the OS, no timing)."""
from __future__ import annotations

import platform
from pathlib import Path
from typing import Optional

import torch


def cpu_bf16() -> dict:
    """Whether this CPU computes bf16 natively (x86: AVX512-BF16 or AMX-BF16; Arm: its BF16 extension).
    Without it, precision=amp on the CPU (bf16 autocast) runs emulated bf16 kernels, many times slower
    than fp32. ``native`` is None where it cannot be told."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "i686", "x86"):
        # AMX tiles come with AMX-BF16 on every CPU that has them (Sapphire Rapids on)
        probes = {"AVX512-BF16": "_is_avx512_bf16_supported", "AMX-BF16": "_is_amx_tile_supported"}
        if all(hasattr(torch.cpu, f) for f in probes.values()):  # torch's own cpuinfo (private helpers)
            found = [name for name, f in probes.items() if getattr(torch.cpu, f)()]
            return {"native": bool(found), "isa": found, "looked_for": list(probes), "source": "torch.cpu"}
        flags = _cpuinfo_words()
        if flags is not None:
            found = [name for name, flag in (("AVX512-BF16", "avx512_bf16"), ("AMX-BF16", "amx_bf16")) if flag in flags]
            return {"native": bool(found), "isa": found, "looked_for": list(probes), "source": "/proc/cpuinfo"}
    elif machine in ("aarch64", "arm64"):
        flags = _cpuinfo_words()
        if flags is not None:
            found = ["BF16"] if "bf16" in flags else []
            return {"native": bool(found), "isa": found, "looked_for": ["BF16"], "source": "/proc/cpuinfo"}
    return {"native": None, "isa": [], "looked_for": [], "source": None}


def _cpuinfo_words() -> Optional[set]:
    """The words of /proc/cpuinfo's flags/Features lines (Linux), or None."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return {w for line in text.splitlines() if line.lower().startswith(("flags", "features"))
            for w in line.split(":", 1)[-1].split()}
