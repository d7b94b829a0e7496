"""Model FLOPs utilisation: FLOPs counted with torch.utils.flop_counter, peaks from a vendor table.

MFU = (training FLOPs per sample x samples/s) / (the device's dense peak for the precision used).
Training FLOPs = forward + backward, counted once on the eager model with a 2-sample batch (the
count of a conv net does not depend on the values, and scales linearly with the batch).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

# Dense (no sparsity) peak TFLOP/s per GPU from the vendors' datasheets, keyed by a substring of
# torch.cuda.get_device_name(). "tensor" is bf16/fp16 on tensor cores, "tf32" TF32, "fp32" plain.
PEAK_TFLOPS = {
    "H200": {"tensor": 989.4, "tf32": 494.7, "fp32": 66.9},
    "H100 80GB HBM3": {"tensor": 989.4, "tf32": 494.7, "fp32": 66.9},  # SXM
    "H100 PCIe": {"tensor": 756.0, "tf32": 378.0, "fp32": 51.2},
    "H100": {"tensor": 989.4, "tf32": 494.7, "fp32": 66.9},
    "A100": {"tensor": 312.0, "tf32": 156.0, "fp32": 19.5},
    "L40S": {"tensor": 362.1, "tf32": 183.0, "fp32": 91.6},
    "RTX 4090": {"tensor": 165.2, "tf32": 82.6, "fp32": 82.6},
}


def peak_tflops(device_name: str, precision_kind: str) -> Optional[float]:
    """The table's peak for this GPU and ``precision_kind`` (tensor | tf32 | fp32); None if unknown."""
    for key, peaks in PEAK_TFLOPS.items():
        if key in device_name:
            return peaks[precision_kind]
    return None


def precision_kind(precision) -> str:
    """Which peak applies: tensor cores for amp, TF32 when allowed, else plain fp32."""
    if precision.dtype is not None:
        return "tensor"
    return "tf32" if precision.tf32 else "fp32"


def training_flops_per_sample(model: nn.Module, image_size: int, device: torch.device,
                              channels_last: bool) -> float:
    """Forward + backward FLOPs for one sample (counted on a 2-sample batch, then halved)."""
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(2, 3, image_size, image_size, device=device).contiguous(memory_format=fmt)
    was_training = model.training
    model.train()
    counter = FlopCounterMode(display=False)
    with counter:
        model(x).float().sum().backward()
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return counter.get_total_flops() / 2


def utilisation(flops_per_sample: float, throughput: Optional[float], peak: Optional[float],
                world_size: int) -> Optional[float]:
    """Achieved FLOP/s over the peak of all the job's GPUs (0..1), or None when not measurable."""
    if not throughput or not peak:
        return None
    return flops_per_sample * throughput / (peak * 1e12 * world_size)
