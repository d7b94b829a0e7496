"""The ``compile`` group: torch.compile modes, with a recorded fall-back to eager on failure."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional

import torch
from torch import nn

from fastpipe.config import CompileConfig

COMPILER_MODULES = ("torch._dynamo", "torch._inductor", "torch._subclasses")


def is_compile_error(exc: BaseException) -> bool:
    """True for failures of Dynamo/Inductor (graph capture, lowering, C++/Triton builds)."""
    return type(exc).__module__.startswith(COMPILER_MODULES)


@dataclass
class CompiledModel:
    """The module the loop calls, and the eager module it falls back to."""

    module: nn.Module
    eager: nn.Module
    choice: str
    mode: Optional[str] = None
    fallback_reason: Optional[str] = None
    device_type: str = "cpu"

    @property
    def active(self) -> bool:
        return self.module is not self.eager

    def fall_back(self, exc: BaseException) -> str:
        """Switch to eager for the rest of the run; returns the warning to record."""
        self.module = self.eager
        first_line = (str(exc).strip().splitlines() or [""])[0][:300]
        self.fallback_reason = f"{type(exc).__name__}: {first_line}"
        return f"compile={self.choice} failed, continuing eager: {self.fallback_reason}"

    def call(self, fn: Callable[[nn.Module], object], warnings: List[str]):
        """Run ``fn(module)``; if compilation fails inside it, fall back to eager and run it again."""
        if not self.active:
            return fn(self.module)
        try:
            return fn(self.module)
        except Exception as exc:
            if not is_compile_error(exc):
                raise
            warnings.append(self.fall_back(exc))
            return fn(self.module)

    def describe(self) -> str:
        if self.choice == "off":
            return "off  (eager)"
        note = ""
        if self.choice == "reduce-overhead" and self.device_type != "cuda":
            note = "  (CUDA graphs need CUDA: Inductor alone here)"
        if self.fallback_reason:
            note += f"  FELL BACK TO EAGER: {self.fallback_reason}"
        return f"{self.choice}  torch.compile(mode={self.mode!r})" + note


def build_compiled(cfg: CompileConfig, model: nn.Module, device: torch.device, warnings: List[str]) -> CompiledModel:
    """Wrap ``model`` per ``cfg`` (a CompileConfig). Compilation itself happens at the first call."""
    result = CompiledModel(model, model, cfg.name, cfg.mode, device_type=device.type)
    if cfg.name == "off":
        return result
    try:
        result.module = torch.compile(model, mode=cfg.mode, backend=cfg.backend, fullgraph=cfg.fullgraph,
                                      dynamic=cfg.dynamic)
    except Exception as exc:  # e.g. an unknown backend name
        warnings.append(result.fall_back(exc))
    return result
