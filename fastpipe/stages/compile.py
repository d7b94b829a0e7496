"""The ``compile`` group: torch.compile modes, with a recorded fall-back to eager on failure."""
from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Callable, List, Optional

import torch
from torch import nn

from fastpipe.config import CompileConfig
from fastpipe.errors import FastpipeError, FastpipeWarning

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

    def fall_back(self, exc: BaseException) -> None:
        """Switch to eager for the rest of the run, with a warning naming the failure."""
        self.module = self.eager
        for unit in self.units:  # nn.Module.compile has no public undo; this is the attribute it sets
            unit._compiled_call_impl = None
        self.units = []
        first_line = (str(exc).strip().splitlines() or [""])[0][:300]
        self.fallback_reason = f"{type(exc).__name__}: {first_line}"
        warnings.warn(f"compile={self.choice} failed, continuing eager: {self.fallback_reason}", FastpipeWarning)

    def call(self, fn: Callable[[nn.Module], object]):
        """Run ``fn(module)``; if compilation fails inside it, fall back to eager and run it again."""
        if not self.active:
            return fn(self.module)
        try:
            return fn(self.module)
        except Exception as exc:
            if not is_compile_error(exc):
                raise
            self.fall_back(exc)
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


def build_compiled(cfg: CompileConfig, builder: Callable, model: nn.Module, device: torch.device,
                   units: Optional[List[nn.Module]] = None) -> CompiledModel:
    """Wrap ``model`` per ``cfg`` (a CompileConfig), or, given ``units``, compile each of them in place
    (``nn.Module.compile``: names and state dicts unchanged), by ``builder``, the choice's registered one
    (``build_eager`` or ``compile_model``). Compilation happens at the first call."""
    extras = "".join([f"  optimize_ddp={cfg.optimize_ddp}" if cfg.optimize_ddp != "auto" else "",
                      "  compiled_autograd" if cfg.compiled_autograd else ""])
    # python_reducer traces DDP's reducer through compiled autograd, which it needs on
    autograd = cfg.compiled_autograd or cfg.optimize_ddp.startswith("python_reducer")
    result = CompiledModel(model, model, cfg.name, cfg.mode, device_type=device.type, extras=extras,
                           backward_backend=cfg.backend if autograd else None)
    builder(cfg, result, units)
    return result


def build_eager(cfg: CompileConfig, result: CompiledModel, units: Optional[List[nn.Module]] = None) -> None:
    """compile=off: the model runs as it is; the compiler's own switches are said to do nothing."""
    if result.extras:
        warnings.warn(f"compile=off:{result.extras} take(s) effect only with torch.compile (compile=default or "
                      "another mode): ignored", FastpipeWarning)


def compile_model(cfg: CompileConfig, result: CompiledModel, units: Optional[List[nn.Module]] = None) -> None:
    """compile=default | reduce-overhead | max-autotune: ``torch.compile(mode=...)`` of the model, or of
    each unit in place; a failure to set it up (an unknown backend) falls back to eager with a warning."""
    try:
        if units:
            for unit in units:
                unit.compile(mode=cfg.mode, backend=cfg.backend, fullgraph=cfg.fullgraph, dynamic=cfg.dynamic)
            result.units = list(units)
            return
        result.module = torch.compile(result.eager, mode=cfg.mode, backend=cfg.backend, fullgraph=cfg.fullgraph,
                                      dynamic=cfg.dynamic)
    except FastpipeError:  # a stop signal (Preempted) that landed here is no compile failure
        raise
    except Exception as exc:  # e.g. an unknown backend name
        result.fall_back(exc)
