"""The ``compile`` group: torch.compile and its mode."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING

from fastpipe.config._checks import one_of
from fastpipe.config.registry import names, register

COMPILED = "fastpipe.stages.compile:compile_model"  # every mode: torch.compile(mode=...)


# Decorators apply bottom-up: the choices register (and are listed) as off, default, reduce-overhead, max-autotune.
# relieves: Python's per-op overhead (host) and, fused, memory traffic (compute); CUDA graphs the launches
@register("compile", "max-autotune", builder=COMPILED, schema_name="compile", relieves=("host", "compute"))
@register("compile", "reduce-overhead", builder=COMPILED, schema_name="compile", relieves=("host",))
@register("compile", "default", builder=COMPILED, schema_name="compile", relieves=("host", "compute"))
@register("compile", "off", builder="fastpipe.stages.compile:build_eager", schema_name="compile")
@dataclass
class CompileConfig:
    name: str = MISSING  # the choice: off | default | reduce-overhead | max-autotune
    mode: Optional[str] = None  # torch.compile(mode=...); the choice's own mode, null with compile=off
    backend: str = "inductor"  # torch.compile(backend=...)
    fullgraph: bool = False  # fail instead of splitting the graph at a graph break
    dynamic: Optional[bool] = False  # fixed shapes: drop_last keeps the batch constant
    # How Dynamo compiles a DistributedDataParallel model (torch._dynamo.config.optimize_ddp): auto =
    # torch's default (ddp_optimizer: one graph per gradient bucket, so all-reduces overlap the
    # backward); python_reducer = the whole step in one graph with DDP's reducer traced through
    # compiled autograd (turned on with it); no_optimization = one graph, all-reduces after it.
    optimize_ddp: str = "auto"
    # Compiled autograd (torch._dynamo.config.compiled_autograd): the backward captured as a graph too.
    compiled_autograd: bool = False

    def __post_init__(self) -> None:
        one_of("compile.name", self.name, names("compile"))
        one_of("compile.optimize_ddp", self.optimize_ddp, ("auto", "ddp_optimizer", "python_reducer",
                                                           "python_reducer_without_compiled_forward",
                                                           "no_optimization"))
