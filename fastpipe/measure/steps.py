"""Measurement: steady-state timing, data-wait, peak memory and GPU utilisation. Prints nothing.

Rules: the first ``warmup_steps`` steps (compilation, autotuning,
CUDA-graph capture, cuDNN benchmarking) are timed apart as ``warmup_s``; throughput and step times
come from the steady windows after them. CUDA is asynchronous, so the host clock is read only after
a synchronisation at window edges (never inside a window). Data-wait is host time spent blocked in
the loader's ``next()``: GPU work still queued is not counted as waiting.
"""
from __future__ import annotations

import resource
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import List, Optional

import torch

from fastpipe.measure.clock import RunClock


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); nothing on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def describe_measurement(warmup_steps: int, window: int) -> str:
    """graph.txt's measure line."""
    return f"warm-up {warmup_steps} steps excluded  windows of {window} steps"


class GpuUtilSampler:
    """Samples NVML's GPU utilisation in a thread while running; ``mean()`` over the samples."""

    def __init__(self, device: torch.device, interval_s: float) -> None:
        self.interval_s, self.samples, self.handle = interval_s, [], None
        self._running = threading.Event()
        self._stop = threading.Event()
        if device.type != "cuda":
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            uuid = str(torch.cuda.get_device_properties(device).uuid)
            self.handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
            self._nvml = pynvml
        except Exception:  # no NVML (driver/container): utilisation is reported as null
            self.handle = None
            return
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self._running.is_set():
                try:
                    self.samples.append(self._nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)
                except Exception:
                    pass

    def resume(self) -> None:
        self._running.set()

    def pause(self) -> None:
        self._running.clear()

    def close(self) -> None:
        self._stop.set()

    def mean(self) -> Optional[float]:
        return round(statistics.fmean(self.samples), 1) if self.samples else None


@dataclass
class Window:
    steps: int = 0
    samples: int = 0
    seconds: float = 0.0
    data_wait: float = 0.0
    host: float = 0.0  # the training thread's CPU time in the window (time.thread_time), its sync at the end excluded


@dataclass
class StepMeter:
    """Feed it each step's data-wait and sample count; ask ``summary()`` at the end."""

    device: torch.device
    warmup_steps: int
    window: int
    gpu_util_interval_s: float = 0.1
    world_size: int = 1  # per-window TensorBoard throughput: this rank's rate x ranks (no collective)
    run_clock: RunClock = field(default_factory=RunClock)  # the training clock starts at the first fetch
    steps: int = 0
    warmup_s: Optional[float] = None
    windows: List[Window] = field(default_factory=list)
    _start: Optional[float] = None
    _open: Optional[Window] = None
    _window_t0: float = 0.0
    _window_cpu0: float = 0.0

    def __post_init__(self) -> None:
        self.util = GpuUtilSampler(self.device, self.gpu_util_interval_s)

    @property
    def in_warmup(self) -> bool:
        return self.steps < self.warmup_steps

    @staticmethod
    def clock() -> float:
        return time.perf_counter()

    def last_window_scalars(self) -> dict:
        """Throughput and data-wait of the window just closed, for TensorBoard."""
        if not self.windows or self.windows[-1].seconds <= 0:
            return {}
        w = self.windows[-1]
        return {"train/throughput": w.samples / w.seconds * self.world_size,
                "train/data_wait_frac": w.data_wait / w.seconds,
                "train/step_time_ms": 1000 * w.seconds / w.steps}

    def postfix(self) -> dict:
        scalars = self.last_window_scalars()
        return {"samples/s": f"{scalars['train/throughput']:.0f}"} if scalars else {}

    def before_fetch(self) -> float:
        """Call before asking the loader for a batch; returns the timestamp for ``after_fetch``."""
        now = time.perf_counter()
        if self._start is None:
            self._start = now
            self.run_clock.start(now)
        if self._open is None and not self.in_warmup:
            self._open, self._window_t0, self._window_cpu0 = Window(), now, time.thread_time()
            self.util.resume()
        return now

    def after_fetch(self, t0: float) -> None:
        if self._open is not None:
            self._open.data_wait += time.perf_counter() - t0

    def after_step(self, samples: int) -> bool:
        """Count a finished optimizer step; True when this step closed a window (host is synced)."""
        self.steps += 1
        if self.steps == self.warmup_steps:
            synchronize(self.device)
            self.warmup_s = time.perf_counter() - self._start
            if self.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(self.device)  # peak of the steady state only
            return True
        if self._open is None:
            return False
        self._open.steps += 1
        self._open.samples += samples
        if self._open.steps >= self.window:
            self.close_window()
            # The next window starts now, not at the next fetch: what the loop does at a window edge
            # (a checkpoint, logging) is training time and counts. Evaluation closes it explicitly.
            self._open, self._window_t0, self._window_cpu0 = Window(), time.perf_counter(), time.thread_time()
            self.util.resume()
            return True
        return False

    def close_window(self) -> None:
        """Close the open window (end of epoch, before evaluation, end of run)."""
        if self._open is None:
            return
        self._open.host = time.thread_time() - self._window_cpu0  # before the sync, which may spin on the CPU
        synchronize(self.device)
        self._open.seconds = time.perf_counter() - self._window_t0
        self.util.pause()
        if self._open.steps:
            self.windows.append(self._open)
        self._open = None

    def summary(self) -> dict:
        """This process's measured numbers; ``combine_ranks`` turns every rank's into the job's."""
        self.close_window()
        self.util.close()
        full = [w for w in self.windows if w.steps >= self.window] or self.windows
        per_step_ms = sorted(1000 * w.seconds / w.steps for w in full)
        seconds = sum(w.seconds for w in self.windows)
        samples = sum(w.samples for w in self.windows)
        return {
            "throughput": samples / seconds if seconds else None,
            "step_time_ms": {
                "median": statistics.median(per_step_ms) if per_step_ms else None,
                "p90": per_step_ms[min(len(per_step_ms) - 1, int(0.9 * len(per_step_ms)))] if per_step_ms else None,
                "spread": (per_step_ms[-1] - per_step_ms[0]) if per_step_ms else None,
                "windows": len(per_step_ms),
            },
            "warmup_s": self.warmup_s,
            "measured_steps": sum(w.steps for w in self.windows),
            "steps_run": self.steps,  # optimizer steps this process ran (a resume's: after the checkpoint)
            "data_wait_frac": sum(w.data_wait for w in self.windows) / seconds if seconds else None,
            "host_frac": sum(w.host for w in self.windows) / seconds if seconds else None,
            "gpu_util": self.util.mean(),
            **peak_memory(self.device),
        }


def peak_memory(device: torch.device) -> dict:
    """CUDA: max_memory_allocated since warm-up; CPU: the process's peak resident set size."""
    if device.type == "cuda":
        return {"peak_mem_gb": torch.cuda.max_memory_allocated(device) / 2**30,
                "peak_mem_kind": "cuda_max_memory_allocated_after_warmup"}
    return {"peak_mem_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "peak_mem_kind": "cpu_max_rss_process"}


PER_RANK_KEYS = ("throughput", "data_wait_frac", "host_frac", "peak_mem_gb", "gpu_util", "warmup_s", "steps_run")


def combine_ranks(summaries: List[dict]) -> dict:
    """The job's numbers from every rank's ``StepMeter.summary()``, in rank order.

    Throughput is the sum of the ranks' own rates (null if any rank measured none); data-wait, peak
    memory and warm-up take the worst rank as the headline value; GPU utilisation is the ranks'
    mean; step time is the slowest rank's (DDP ranks step together). ``per_rank`` keeps the lists.
    """
    def values(key: str) -> list:
        return [s.get(key) for s in summaries]

    def worst(key: str):
        known = [v for v in values(key) if v is not None]
        return max(known) if known else None

    job = dict(summaries[0])
    rates = values("throughput")
    utils = [u for u in values("gpu_util") if u is not None]
    job.update(throughput=sum(rates) if None not in rates else None, data_wait_frac=worst("data_wait_frac"),
               host_frac=worst("host_frac"),
               peak_mem_gb=worst("peak_mem_gb"), warmup_s=worst("warmup_s"),
               gpu_util=round(statistics.fmean(utils), 1) if utils else None,
               step_time_ms=max(summaries, key=lambda s: s["step_time_ms"]["median"] or 0.0)["step_time_ms"],
               per_rank={key: values(key) for key in PER_RANK_KEYS})
    job.pop("steps_run", None)  # per rank only: the job's steps are the loop's (a resume's included)
    return job
