"""What this machine and process are: versions and hardware for the run's record, the CUDA devices
training would use, whether the CPU computes bf16 natively, when the process started. Reads the
machine (torch's probes, /proc), never the environment's settings (runtime.py does). torch is imported
by the functions that use it: the Hydra process asks when it started before it imports torch."""
from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Optional

_IMPORTED_AT = time.time()


def process_started_at() -> float:
    """When this process started (Unix time): from /proc on Linux (to 1/100 s: its start in clock ticks
    since boot against the uptime), else the moment this module was imported."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return _IMPORTED_AT


def cpu_bf16() -> dict:
    """Whether this CPU computes bf16 natively (x86: AVX512-BF16 or AMX-BF16; Arm: its BF16 extension).
    Without it, bf16 autocast on the CPU (precision=amp) runs emulated kernels, many times slower than
    fp32 (the doctor says so; precision=amp warns). ``native`` is None where it cannot be told;
    ``isa``: what was found; ``source``: torch's own CPU probes, or the kernel's /proc/cpuinfo flags."""
    import torch

    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "i686", "x86"):
        probes = {"AVX512-BF16": "_is_avx512_bf16_supported", "AMX-BF16": "_is_amx_tile_supported"}
        if all(hasattr(torch.cpu, probe) for probe in probes.values()):  # AMX tiles come with AMX-BF16
            found = [isa for isa, probe in probes.items() if getattr(torch.cpu, probe)()]
            return {"native": bool(found), "isa": found, "looked_for": list(probes), "source": "torch.cpu"}
        flags = _cpuinfo_words()
        if flags is not None:
            found = [isa for isa, flag in (("AVX512-BF16", "avx512_bf16"), ("AMX-BF16", "amx_bf16")) if flag in flags]
            return {"native": bool(found), "isa": found, "looked_for": list(probes), "source": "/proc/cpuinfo"}
    elif machine in ("aarch64", "arm64"):
        flags = _cpuinfo_words()
        if flags is not None:
            found = ["BF16"] if "bf16" in flags else []
            return {"native": bool(found), "isa": found, "looked_for": ["BF16"], "source": "/proc/cpuinfo"}
    return {"native": None, "isa": [], "looked_for": [], "source": None}


def _cpuinfo_words() -> Optional[set]:
    """The words of /proc/cpuinfo's ``flags`` / ``Features`` lines (Linux), or None."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return {word for line in text.splitlines() if line.lower().startswith(("flags", "features"))
            for word in line.split(":", 1)[-1].split()}


def visible_gpus(requested_device: str) -> int:
    """CUDA devices training would use: 0 with device=cpu or without CUDA."""
    import torch

    if requested_device == "cpu" or not torch.cuda.is_available():
        return 0
    return torch.cuda.device_count()


def environment(device: Optional[torch.device], world_size: int) -> dict:
    """Versions and hardware, for metrics.json and the report header (device None: not set up yet)."""
    import torch

    env = {"torch": torch.__version__, "python": platform.python_version(),
           "device": None if device is None else str(device),
           "device_name": platform.processor() or platform.machine(), "cuda": torch.version.cuda,
           "world_size": world_size, "host": platform.node(), "cpu_count": os.cpu_count()}
    if device is not None and device.type == "cuda":
        env["device_name"] = torch.cuda.get_device_name(device)
        env["cudnn"] = torch.backends.cudnn.version()
    return env
