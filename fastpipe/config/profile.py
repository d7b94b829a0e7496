"""The ``profile`` group: torch.profiler traces of a few steps (docs/tools.md)."""
from __future__ import annotations

from dataclasses import dataclass

from fastpipe.config._checks import one_of
from fastpipe.errors import ConfigError


@dataclass
class ProfileConfig:
    name: str = "off"  # off | on
    skip_first: int = 0  # steps before the schedule starts
    wait: int = 5  # idle steps per cycle (lets warm-up and compilation pass)
    warmup: int = 2  # steps traced, then discarded (the profiler's own start-up cost)
    active: int = 5  # steps recorded per cycle
    repeat: int = 1  # cycles; each writes one trace file
    record_shapes: bool = False  # record each operator's input shapes (torch.profiler's record_shapes)
    profile_memory: bool = False  # record tensor allocations and frees (torch.profiler's profile_memory)
    with_stack: bool = False  # record the Python stack of each operator (larger traces)

    def __post_init__(self) -> None:
        one_of("profile.name", self.name, ("off", "on"))
        if min(self.skip_first, self.wait, self.warmup) < 0 or min(self.active, self.repeat) < 1:
            raise ConfigError("profile.skip_first/wait/warmup must be >= 0, profile.active/repeat >= 1")
