"""The ``compile`` group: torch.compile and its mode."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING

from fastpipe.config._checks import one_of


@dataclass
class CompileConfig:
    name: str = MISSING  # the choice: off | default | reduce-overhead | max-autotune
    mode: Optional[str] = None  # torch.compile(mode=...); the choice's own mode, null with compile=off
    backend: str = "inductor"  # torch.compile(backend=...)
    fullgraph: bool = False  # fail instead of splitting the graph at a graph break
    dynamic: Optional[bool] = False  # fixed shapes: drop_last keeps the batch constant

    def __post_init__(self) -> None:
        one_of("compile.name", self.name, ("off", "default", "reduce-overhead", "max-autotune"))
