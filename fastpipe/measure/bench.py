"""Hardware ceilings for ``python -m fastpipe.doctor --bench``: matmul TFLOP/s and copy GB/s.

On CUDA each repeat is timed with CUDA events after a warm-up (so neither launch latency nor
lazy initialisation is counted) and the median of the repeats is reported: an fp32 and a bf16
matmul of N x N (2 N^3 FLOPs; fp32 as the process's TF32 switch has it, which is off by default)
and a device-to-device copy (bytes read + bytes written). Without CUDA the same runs on the CPU
with small sizes, timed with perf_counter, and every label says "cpu".
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, List, Optional

import torch


def _times(fn: Callable[[], object], repeats: int, device: torch.device, warmup: int = 3) -> List[float]:
    """Seconds per call of ``fn``, one number per repeat, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        out = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
        return out
    torch.cuda.synchronize(device)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) / 1e3 for start, end in events]


def run_bench(size: Optional[int] = None, copy_mb: Optional[int] = None, repeats: int = 10) -> dict:
    """Measure the matmul and copy ceilings of the training device (CUDA when present, else CPU)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    n = size or (8192 if device.type == "cuda" else 1024)
    results = []
    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        seconds = statistics.median(_times(lambda a=a, b=b: torch.mm(a, b), repeats, device))
        tf32_on = dtype is torch.float32 and device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32
        tf32 = "  (TF32 on)" if tf32_on else ""
        results.append({"label": f"{where} matmul {n}x{n} {name}{tf32}", "value": 2 * n**3 / seconds / 1e12,
                        "unit": "TFLOP/s", "median_s": seconds})
        del a, b
    nbytes = (copy_mb or (1024 if device.type == "cuda" else 64)) * 2**20
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    seconds = statistics.median(_times(lambda: dst.copy_(src), repeats, device))
    kind = "device-to-device copy" if device.type == "cuda" else "memory copy"
    results.append({"label": f"{where} {kind} {nbytes / 2**20:.0f} MiB (read + write)",
                    "value": 2 * nbytes / seconds / 1e9, "unit": "GB/s", "median_s": seconds})
    timing = "CUDA events" if device.type == "cuda" else "perf_counter"
    return {"device": str(device), "timing": f"{timing}, median of {repeats} after warm-up", "results": results}
