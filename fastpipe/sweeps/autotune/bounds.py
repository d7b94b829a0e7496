"""What bounds a run, from its metrics.json: the probe of ``hydra/sweeper=autotune`` (docs/autotune.md).

- **data**: the step waits for its next batch for ``DATA_WAIT`` or more of the steady state.
- **host**: on a GPU, utilisation below ``GPU_BUSY`` while the data is on time, and the training thread's
  CPU time at least ``HOST_BUSY`` of the step's wall time (it is busy issuing work, not waiting for the
  GPU): the GPU waits on Python and kernel launches. Without the CPU-time measurement, utilisation alone.
- **compute**: otherwise (the GPU busy, or a CPU run whose data is on time): the arithmetic itself.
- **memory headroom**, beside the bound: the run's peak memory under ``HEADROOM`` of the device's, so the
  batch could at least double.

The evidence names every number the verdict read, so report.md can show why.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

DATA_WAIT = 0.10  # share of the steady state spent waiting for a batch: at or past it, the loader bounds the step
GPU_BUSY = 80.0  # NVML utilisation (%) under which the GPU idles between kernels
HOST_BUSY = 0.8  # the training thread's CPU time over the step's wall time at or past which it is the host
HEADROOM = 0.5  # peak memory under this share of the device's: room for a batch twice as large
BOUNDS = ("data", "host", "compute", "memory")


@dataclass
class Probe:
    """A run's bound, whether it has memory headroom, and the numbers read."""

    bound: str
    headroom: bool
    evidence: dict = field(default_factory=dict)

    def record(self) -> dict:
        return {"bound": self.bound, "headroom": self.headroom, "evidence": self.evidence}

    def describe(self) -> str:
        """``data (data-wait 31 %)``: the bound and the number that decided it, for logs and report.md."""
        e = self.evidence
        wait = e.get("data_wait_frac") or 0.0  # None: no steady window was measured
        why = {"data": f"data-wait {wait:.0%}",
               "host": f"GPU {e.get('gpu_util')} % busy, data-wait {wait:.0%}"
                       + (f", CPU {e['host_frac']:.0%} of the step" if e.get("host_frac") is not None else ""),
               "compute": (f"GPU {e.get('gpu_util')} % busy" + (f", MFU {e['mfu']:.0%}" if e.get("mfu") else "")
                           if e.get("gpu_util") is not None else f"CPU run, data-wait {wait:.0%}")}
        room = (f"; memory {e['peak_mem_gb']:.1f} of {e['device_mem_gb']:.0f} GB: room for a larger batch"
                if self.headroom else "")
        return f"{self.bound} ({why.get(self.bound, '')}){room}"


def classify(metrics: dict) -> Probe:
    """The probe of one run's (or one job's combined repeats') metrics.json."""
    env = metrics.get("env") or {}
    evidence = {key: metrics.get(key) for key in ("data_wait_frac", "gpu_util", "host_frac", "mfu", "peak_mem_gb",
                                                  "throughput", "batch_size")}
    evidence["device"], evidence["device_mem_gb"] = env.get("device"), env.get("device_mem_gb")
    wait, util, host = metrics.get("data_wait_frac") or 0.0, metrics.get("gpu_util"), metrics.get("host_frac")
    if wait >= DATA_WAIT:
        bound = "data"
    elif util is not None and util < GPU_BUSY and (host is None or host >= HOST_BUSY):
        bound = "host"
    else:
        bound = "compute"
    return Probe(bound, _headroom(metrics.get("peak_mem_gb"), env.get("device_mem_gb"),
                                  metrics.get("peak_mem_kind")), evidence)


def _headroom(peak: Optional[float], total: Optional[float], kind: Optional[str]) -> bool:
    """Whether the device's memory holds a batch twice as large; unknown (a CPU's RSS, no total): False."""
    if peak is None or not total or (kind or "").startswith("rss"):
        return False
    return peak < HEADROOM * total
