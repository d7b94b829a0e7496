"""``runtime.*`` and ``measure.*``: process-wide switches, and how a run measures itself."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from fastpipe.config._checks import auto_or_bool
from fastpipe.errors import ConfigError


@dataclass
class RuntimeConfig:
    cudnn_benchmark: bool = True  # let cuDNN time its algorithms for each new shape
    channels_last: Any = "auto"  # NHWC memory format; auto = on for conv nets on CUDA
    cuda_alloc_conf: Optional[str] = None  # PYTORCH_CUDA_ALLOC_CONF, e.g. "expandable_segments:True"
    progress: bool = True  # tqdm progress bar

    def __post_init__(self) -> None:
        auto_or_bool("runtime.channels_last", self.channels_last)

    def use_channels_last(self, conv_net: bool, device_type: str) -> bool:
        if self.channels_last == "auto":
            return conv_net and device_type == "cuda"
        return bool(self.channels_last)


@dataclass
class MeasureConfig:
    warmup_steps: int = 5  # excluded from throughput and timed apart (compilation happens here)
    window: int = 10  # steps per timing window; step-time median / p90 are over windows
    gpu_util_interval_s: float = 0.1  # NVML sampling period

    def __post_init__(self) -> None:
        if self.warmup_steps < 1 or self.window < 1:
            raise ConfigError("measure.warmup_steps and measure.window must be >= 1")
