"""The ``precision`` group: fp32, automatic mixed precision (bf16 autocast, fp16 + GradScaler), or fp8
matmuls on the Linear layers with bf16 autocast around the rest (fp8.py)."""
from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from fastpipe.config import Fp8PrecisionConfig, PrecisionConfig
from fastpipe.errors import FastpipeWarning

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class Precision:
    """What the loop needs: an autocast context and a GradScaler (disabled unless fp16); and what the
    launcher applies to the model it builds, before wrapping or sharding it (``prepare``)."""

    name: str
    dtype: Optional[torch.dtype]
    device_type: str
    scaler: torch.amp.GradScaler
    tf32: bool = False
    by_fsdp: bool = False  # launcher=fsdp: FSDP2's MixedPrecisionPolicy casts, not autocast
    note: str = ""  # what graph.txt should say about it on this machine (emulated bf16)
    fp8_config: Optional[Fp8PrecisionConfig] = None  # precision=fp8: which layers, which recipe
    fp8: object = None  # precision=fp8: the Fp8Layers ``prepare`` converted (fp8.py); None before

    def autocast(self):
        if self.dtype is None or self.by_fsdp:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def prepare(self, model: nn.Module, device: torch.device) -> None:
        """Called by the launcher on the bare model it built (on ``device``, or on the meta device to shard):
        precision=fp8 swaps the chosen Linear layers for torchao's Float8Linear in place; else nothing."""
        if self.fp8_config is not None:
            from fastpipe.stages.fp8 import convert_fp8

            self.fp8 = convert_fp8(model, self.fp8_config, device, self.by_fsdp)

    def describe(self) -> str:
        if self.name == "fp8":
            return self.fp8.describe(self.by_fsdp) if self.fp8 is not None else "fp8  no layer converted: bf16 autocast"
        if self.dtype is None:
            return f"fp32  (TF32 {'allowed' if self.tf32 else 'off'})"
        dtype = "bf16" if self.dtype is torch.bfloat16 else "fp16"
        if self.by_fsdp:
            return (f"amp  {dtype} by FSDP2's MixedPrecisionPolicy (no autocast)  GradScaler "
                    f"{'on (sharded)' if self.scaler.is_enabled() else 'off'}")
        return (f"amp  {dtype} autocast on {self.device_type}  GradScaler {'on' if self.scaler.is_enabled() else 'off'}"
                + (f"  ({self.note})" if self.note else ""))


def build_fp32(cfg: PrecisionConfig, device: torch.device, by_fsdp: bool = False) -> Precision:
    """precision=fp32 (TF32 matmuls only when allowed, and on CUDA)."""
    return Precision("fp32", None, device.type, torch.amp.GradScaler(device.type, enabled=False),
                     tf32=cfg.tf32 and device.type == "cuda")


def build_amp(cfg: PrecisionConfig, device: torch.device, by_fsdp: bool = False) -> Precision:
    """precision=amp: bf16 autocast where supported, else fp16 with loss scaling."""
    bf16_ok = device.type == "cuda" and torch.cuda.is_bf16_supported()
    dtype = DTYPES[cfg.amp_dtype(device.type, bf16_ok)]
    if by_fsdp:
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        scaler = ShardedGradScaler(device.type, enabled=dtype is torch.float16)
    else:
        scaler = torch.amp.GradScaler(device.type, enabled=dtype is torch.float16)
    return Precision("amp", dtype, device.type, scaler, by_fsdp=by_fsdp, note=_emulated_bf16(device, dtype))


def _emulated_bf16(device: torch.device, dtype: torch.dtype) -> str:
    """Warn (and say, for graph.txt) when bf16 on this CPU is emulated: many times slower than fp32."""
    from fastpipe.machine import cpu_bf16

    cpu = cpu_bf16() if device.type == "cpu" and dtype is torch.bfloat16 else {"native": None}
    if cpu["native"] is not False:
        return ""
    warnings.warn(f"precision=amp trains in bf16, which this CPU computes only in emulation (it has no "
                  f"{' or '.join(cpu['looked_for'])}), many times slower than fp32; use precision=fp32 on this "
                  "machine", FastpipeWarning)
    return "emulated on this CPU: precision=fp32 is faster here"


def build_fp8(cfg: Fp8PrecisionConfig, device: torch.device, by_fsdp: bool = False) -> Precision:
    """precision=fp8: bf16 autocast (or FSDP2's bf16 policy) around the Linear layers the launcher's
    ``prepare`` call converts; no loss scaling (torchao scales each fp8 cast itself). Evaluating saved
    weights (no model prepared) is bf16 autocast alone."""
    return Precision("fp8", torch.bfloat16, device.type, torch.amp.GradScaler(device.type, enabled=False),
                     by_fsdp=by_fsdp, fp8_config=cfg)
