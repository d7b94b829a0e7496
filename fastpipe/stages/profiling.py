"""The ``profile`` group: torch.profiler over a few training steps, traces into the run folder.

profile=on records steps on a wait/warmup/active schedule (``profile.wait``, ``warmup``, ``active``,
``repeat``) and writes each active span with ``tensorboard_trace_handler`` into ``<run>/profile/``
(``*.pt.trace.json``: TensorBoard's profiler plugin, Perfetto or chrome://tracing open it). The loop
calls ``step()`` once per optimizer step. Profiled steps run slower, so the run's timing is flagged.
"""
from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Optional

import torch

from fastpipe.config import ProfileConfig
from fastpipe.errors import FastpipeWarning


class NoProfiler(contextlib.nullcontext):
    """profile=off: ``step()`` does nothing."""

    def step(self) -> None:
        pass


def build_profiler(cfg: Optional[ProfileConfig], run_dir: Path, device: torch.device, is_main: bool):
    """A torch.profiler.profile per ``cfg`` (a ProfileConfig; None = off), used as a context manager.

    Only rank 0 profiles (the run folder is rank 0's). A warning records which steps were profiled.
    """
    if cfg is None or cfg.name == "off" or not is_main:
        return NoProfiler()
    from torch.profiler import (
        ProfilerActivity,
        profile,
        schedule,
        tensorboard_trace_handler,
    )

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    first = cfg.skip_first + cfg.wait + cfg.warmup + 1
    last = cfg.skip_first + (cfg.wait + cfg.warmup + cfg.active) * cfg.repeat
    warnings.warn(f"profile=on: steps {first}..{last} ran under torch.profiler (and its warm-up steps before them); "
                  "profiling slows steps, so throughput and step times are distorted: compare speed with profile=off",
                  FastpipeWarning)
    return profile(
        activities=activities,
        schedule=schedule(skip_first=cfg.skip_first, wait=cfg.wait, warmup=cfg.warmup, active=cfg.active,
                          repeat=cfg.repeat),
        on_trace_ready=tensorboard_trace_handler(str(Path(run_dir) / "profile"), worker_name="rank0"),
        record_shapes=cfg.record_shapes, profile_memory=cfg.profile_memory, with_stack=cfg.with_stack)
