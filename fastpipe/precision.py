"""The ``precision`` group: fp32, or automatic mixed precision (bf16 autocast, fp16 + GradScaler)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Optional

import torch

from fastpipe.errors import ConfigError

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Precision:
    """What the loop needs: an autocast context and a GradScaler (disabled unless fp16)."""

    name: str
    dtype: Optional[torch.dtype]
    device_type: str
    scaler: torch.amp.GradScaler
    tf32: bool = False

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def describe(self) -> str:
        if self.dtype is None:
            return f"fp32  (TF32 {'allowed' if self.tf32 else 'off'})"
        dtype = "bf16" if self.dtype is torch.bfloat16 else "fp16"
        return f"amp  {dtype} autocast on {self.device_type}  GradScaler {'on' if self.scaler.is_enabled() else 'off'}"


def resolve_amp_dtype(requested: str, device: torch.device) -> torch.dtype:
    """``auto`` = bf16 where the device supports it (CPU, Ampere and newer GPUs), else fp16."""
    if requested == "auto":
        if device.type == "cpu" or torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float16
    if requested == "fp16" and device.type == "cpu":
        raise ConfigError("precision.dtype=fp16 is a CUDA mode (GradScaler loss scaling); on the CPU use "
                          "precision.dtype=bf16 (or auto)")
    return DTYPES[requested]


def build_precision(cfg, device: torch.device) -> Precision:
    """The Precision for ``cfg`` (a PrecisionConfig) on ``device``."""
    if cfg.name == "fp32":
        return Precision("fp32", None, device.type, torch.amp.GradScaler(device.type, enabled=False),
                         tf32=cfg.tf32 and device.type == "cuda")
    dtype = resolve_amp_dtype(cfg.dtype, device)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype is torch.float16)
    return Precision("amp", dtype, device.type, scaler)
