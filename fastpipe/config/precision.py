"""The ``precision`` group: fp32, automatic mixed precision, or fp8 matmuls (torchao's float8 training)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from omegaconf import MISSING

from fastpipe.config._checks import auto_or_bool, one_of
from fastpipe.config.registry import Requirement, names, register
from fastpipe.errors import ConfigError


# Decorators apply bottom-up: the choices register (and are listed) as fp32, amp (then fp8, below).
@register("precision", "amp", builder="fastpipe.stages.precision:build_amp", schema_name="precision", half=True,
          relieves=("compute", "memory"))
@register("precision", "fp32", builder="fastpipe.stages.precision:build_fp32", schema_name="precision")
@dataclass
class PrecisionConfig:
    name: str = MISSING  # fp32 | amp (fp8 has its own schema, below)
    # amp only: auto = bf16 where the device supports it (CPU, Ampere and newer GPUs), else fp16 with
    # GradScaler loss scaling; or bf16 | fp16.
    dtype: str = "auto"
    tf32: bool = False  # fp32 only: allow TF32 tensor-core matmuls / convolutions on CUDA (~1e-3 relative error)

    def __post_init__(self) -> None:
        one_of("precision.name", self.name, tuple(n for n in names("precision") if n != "fp8"))
        one_of("precision.dtype", self.dtype, ("auto", "bf16", "fp16"))

    def amp_dtype(self, device_type: str, bf16_supported: bool) -> str:
        """The autocast dtype (``bf16`` or ``fp16``) that ``dtype`` means on this device."""
        if self.dtype == "auto":
            return "bf16" if device_type == "cpu" or bf16_supported else "fp16"
        if self.dtype == "fp16" and device_type == "cpu":
            raise ConfigError("precision.dtype=fp16 is a CUDA mode (GradScaler loss scaling); on the CPU use "
                              "precision.dtype=bf16 (or auto)")
        return self.dtype


@register("precision", "fp8", builder="fastpipe.stages.precision:build_fp8", half=True, relieves=("compute", "memory"),
          requires=Requirement("torchao", "fastpipe[fp8]", "torchao's float8 training", "precision=amp"))
@dataclass
class Fp8PrecisionConfig:
    """precision=fp8: the chosen Linear layers' matmuls in float8 (torchao's float8 training, docs/precision.md),
    bf16 autocast around everything else. Needs torch.compile and a GPU of compute capability >= 8.9
    (Ada, Hopper and newer); on the CPU torchao emulates it (slower than bf16: for tests and debugging)."""

    name: str = "fp8"  # the choice: precision=fp8
    # How float8 scales are taken: tensorwise = one scale per tensor (fastest); rowwise = one per row
    # (closer to bf16's accuracy, a little slower).
    recipe: str = "tensorwise"
    # Which layers run in fp8: auto = every nn.Linear whose weight's dimensions are multiples of 16 (what
    # fp8 tensor cores take), except weights tied to another module (a GPT's head tied to its token
    # embedding); or a list of module names (e.g. [blocks.0.mlp.0, blocks.0.mlp.2]). graph.txt lists them.
    fp8_layers: Any = "auto"
    # launcher=fsdp: cast the fp8 layers' weight shards to float8 before the all-gather (half bf16's bytes on
    # the link); auto = on where torchao supports it (recipe=tensorwise).
    fsdp_fp8_all_gather: Any = "auto"
    dtype: str = "bf16"  # the autocast dtype around the fp8 layers (bf16 only: fp8 training has no fp16 mode)

    def __post_init__(self) -> None:
        one_of("precision.name", self.name, ("fp8",))
        one_of("precision.recipe", self.recipe, ("tensorwise", "rowwise"))
        one_of("precision.dtype", self.dtype, ("bf16",))
        auto_or_bool("precision.fsdp_fp8_all_gather", self.fsdp_fp8_all_gather)
        layers = self.fp8_layers
        if layers != "auto" and not (isinstance(layers, list) and layers and all(isinstance(n, str) for n in layers)):
            raise ConfigError(f"precision.fp8_layers={layers!r}: use auto, or a list of module names "
                              "(e.g. [blocks.0.mlp.0]; graph.txt of a precision=fp8 run lists the convertible ones)")
        if self.fsdp_fp8_all_gather is True and self.recipe != "tensorwise":
            raise ConfigError(f"precision.fsdp_fp8_all_gather=true with precision.recipe={self.recipe}: torchao "
                              "gathers fp8 weights for recipe=tensorwise only; use precision.recipe=tensorwise, or "
                              "precision.fsdp_fp8_all_gather=auto")

    def fsdp_all_gather(self) -> bool:
        """Whether launcher=fsdp all-gathers the fp8 layers' weights in float8."""
        return self.recipe == "tensorwise" if self.fsdp_fp8_all_gather == "auto" else bool(self.fsdp_fp8_all_gather)


AnyPrecisionConfig = Union[PrecisionConfig, Fp8PrecisionConfig]
