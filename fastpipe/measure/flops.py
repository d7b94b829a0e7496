"""Model FLOPs utilisation: FLOPs counted with torch.utils.flop_counter, peaks from a vendor table.

MFU = (training FLOPs per sample x samples/s) / (the device's dense peak for the precision used).
Training FLOPs = forward + backward, counted once on the eager model with two samples of the first
training batch (the count does not depend on the values, and scales linearly with the batch), or
given by the model itself (``flops_per_sample``).
"""
from __future__ import annotations

from typing import Optional, Tuple

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


def _output_sum(output) -> torch.Tensor:
    """A scalar that depends on every tensor of a model's output (for a backward pass)."""
    if isinstance(output, torch.Tensor):
        return output.float().sum()
    parts = output.values() if isinstance(output, dict) else output
    return sum(_output_sum(p) for p in parts if isinstance(p, (torch.Tensor, tuple, list, dict)))


def training_flops_per_sample(model: nn.Module, inputs, samples: int) -> Tuple[Optional[float], str]:
    """(forward + backward FLOPs for one sample, how they were counted), on ``inputs`` (a batch of
    ``samples``). A model's own ``flops_per_sample(inputs)`` wins (e.g. GPT's 6N + attention);
    otherwise torch.utils.flop_counter counts one training step on the batch. Buffers (BatchNorm's
    running statistics) are restored afterwards, so counting leaves the model as it was."""
    own = getattr(model, "flops_per_sample", None)
    if callable(own):
        return float(own(inputs)), f"{type(model).__name__}.flops_per_sample"
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    was_training = model.training
    model.train()
    counter = FlopCounterMode(display=False)
    try:
        with counter:
            _output_sum(model(inputs)).backward()
    except Exception:  # a model the counter cannot trace: MFU stays null, training is unaffected
        return None, "not counted (torch.utils.flop_counter failed on this model)"
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name in buffers:
                    b.copy_(buffers[name])
    return counter.get_total_flops() / max(1, samples), "torch.utils.flop_counter (one training step)"


def utilisation(flops_per_sample: Optional[float], throughput: Optional[float], peak: Optional[float],
                world_size: int) -> Optional[float]:
    """Achieved FLOP/s over the peak of all the job's GPUs (0..1), or None when not measurable."""
    if not throughput or not peak or not flops_per_sample:
        return None
    return flops_per_sample * throughput / (peak * 1e12 * world_size)
