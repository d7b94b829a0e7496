"""The ``compile`` group: torch.compile modes, with a recorded fall-back to eager on failure."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
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
    extras: str = ""  # the DDP and autograd switches, for graph.txt
    backward_backend: Optional[str] = None  # compiled autograd's backend, or None: eager backward
    units: List[nn.Module] = field(default_factory=list)  # launcher.compile_per_block: compiled in place

    def backward_context(self):
        """Around ``loss.backward()``: compiled autograd captures the backward as a graph (the loop's
        backward runs outside the compiled module, so torch's config switch alone would not reach it)."""
        if self.backward_backend is None or not self.active:
            return contextlib.nullcontext()
        from torch._dynamo import compiled_autograd

        return compiled_autograd._enable(torch.compile(backend=self.backward_backend))

    @property
    def active(self) -> bool:
        return self.module is not self.eager or bool(self.units)

    def fall_back(self, exc: BaseException) -> str:
        """Switch to eager for the rest of the run; returns the warning to record."""
        self.module = self.eager
        for unit in self.units:  # nn.Module.compile has no public undo; this is the attribute it sets
            unit._compiled_call_impl = None
        self.units = []
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
        where = f" on each of {len(self.units)} FSDP units" if self.units else ""
        return f"{self.choice}  torch.compile(mode={self.mode!r}){where}" + note + self.extras


def build_compiled(cfg: CompileConfig, model: nn.Module, device: torch.device, warnings: List[str],
                   units: Optional[List[nn.Module]] = None) -> CompiledModel:
    """Wrap ``model`` per ``cfg`` (a CompileConfig), or, given ``units``, compile each of them in place
    (``nn.Module.compile``: names and state dicts unchanged). Compilation happens at the first call."""
    extras = "".join([f"  optimize_ddp={cfg.optimize_ddp}" if cfg.optimize_ddp != "auto" else "",
                      "  compiled_autograd" if cfg.compiled_autograd else ""])
    # python_reducer traces DDP's reducer through compiled autograd, which it needs on
    autograd = cfg.compiled_autograd or cfg.optimize_ddp.startswith("python_reducer")
    result = CompiledModel(model, model, cfg.name, cfg.mode, device_type=device.type, extras=extras,
                           backward_backend=cfg.backend if autograd else None)
    if cfg.name == "off":
        if extras:
            warnings.append(f"compile=off:{extras} take(s) effect only with torch.compile (compile=default or "
                            "another mode): ignored")
        return result
    try:
        if units:
            for unit in units:
                unit.compile(mode=cfg.mode, backend=cfg.backend, fullgraph=cfg.fullgraph, dynamic=cfg.dynamic)
            result.units = list(units)
            return result
        result.module = torch.compile(model, mode=cfg.mode, backend=cfg.backend, fullgraph=cfg.fullgraph,
                                      dynamic=cfg.dynamic)
    except Exception as exc:  # e.g. an unknown backend name
        warnings.append(result.fall_back(exc))
    return result
