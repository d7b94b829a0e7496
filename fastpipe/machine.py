"""What this machine and process are: versions and hardware for the run's record, the CUDA devices
training would use, whether the CPU computes bf16 natively, when the process started, which CPUs are
left beyond a process's first physical cores. Reads the machine (torch's probes, NVML, /proc), never the
environment's settings (runtime.py does). torch is imported by the functions that use it: the entry
point asks when it started before it imports torch."""
from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import List, Optional, Set

_IMPORTED_AT = time.time()


def process_started_at() -> float:
    """When this process started (Unix time): from /proc on Linux (to 1/100 s: its start in clock ticks
    since boot against the uptime; an exec keeps it), else the moment this module was imported."""
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


def nvml_gpu_count() -> int:
    """The GPUs the NVIDIA driver sees (NVML); 0 without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0


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
        env["device_mem_gb"] = round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1)
    return env


def smt_siblings(cpu: int) -> Set[int]:
    """``cpu`` and its SMT siblings (one physical core), as Linux lists them; ``{cpu}`` elsewhere."""
    try:
        text = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip()
    except OSError:
        return {cpu}
    out = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out


def cpus_beyond(keep_cores: int, share: int = 1, part: int = 0) -> Optional[List[int]]:
    """The CPUs this process may use less the first ``keep_cores`` physical cores among them (SMT
    siblings included), cut into ``share`` equal parts (one a local rank) and part ``part`` of them;
    None where CPU affinity is not available or nothing would be left."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    kept: Set[int] = set()
    cores = 0
    for cpu in allowed:
        if cpu in kept:
            continue
        if cores == keep_cores:
            break
        kept |= smt_siblings(cpu) & set(allowed)
        cores += 1
    rest = [cpu for cpu in allowed if cpu not in kept]
    size = len(rest) // max(1, share)
    mine = rest[part * size:(part + 1) * size]
    return mine or None


def cpu_list_text(cpus: List[int]) -> str:
    """[4, 5, 6, 7, 12, 13] -> '4-7,12-13' (Linux's cpulist format)."""
    runs, start = [], cpus[0]
    for a, b in zip(cpus, cpus[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start}-{a}" if a != start else str(a))
            start = b
    return ",".join(runs)
