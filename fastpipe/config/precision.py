"""The ``precision`` group: fp32, or automatic mixed precision."""
from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from fastpipe.config._checks import one_of
from fastpipe.config.registry import names, register
from fastpipe.errors import ConfigError


# Decorators apply bottom-up: the choices register (and are listed) as fp32, amp.
@register("precision", "amp", builder="fastpipe.stages.precision:build_amp", schema_name="precision")
@register("precision", "fp32", builder="fastpipe.stages.precision:build_fp32", schema_name="precision")
@dataclass
class PrecisionConfig:
    name: str = MISSING  # fp32 | amp
    # amp only: auto = bf16 where the device supports it (CPU, Ampere and newer GPUs), else fp16 with
    # GradScaler loss scaling; or bf16 | fp16.
    dtype: str = "auto"
    tf32: bool = False  # fp32 only: allow TF32 tensor-core matmuls / convolutions on CUDA (~1e-3 relative error)

    def __post_init__(self) -> None:
        one_of("precision.name", self.name, names("precision"))
        one_of("precision.dtype", self.dtype, ("auto", "bf16", "fp16"))

    def amp_dtype(self, device_type: str, bf16_supported: bool) -> str:
        """The autocast dtype (``bf16`` or ``fp16``) that ``dtype`` means on this device."""
        if self.dtype == "auto":
            return "bf16" if device_type == "cpu" or bf16_supported else "fp16"
        if self.dtype == "fp16" and device_type == "cpu":
            raise ConfigError("precision.dtype=fp16 is a CUDA mode (GradScaler loss scaling); on the CPU use "
                              "precision.dtype=bf16 (or auto)")
        return self.dtype
