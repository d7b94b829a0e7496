"""How the ``gpus`` launcher shares a machine among concurrent sweep jobs: one slot per running job.

A slot is ``gpus_per_job`` GPUs (the strings its job gets as ``CUDA_VISIBLE_DEVICES``) and an equal,
disjoint share of the CPU cores the sweep may use (its job's CPU affinity, which fastpipe's
``cpu_cores()`` and so ``data.num_workers=auto``, ``data.num_threads=auto`` and torch's intra-op
threads honour). Slots never share a GPU or a core, so concurrent jobs measure without stealing
from each other.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from fastpipe.errors import ConfigError


@dataclass(frozen=True)
class Slot:
    index: int
    gpus: Tuple[str, ...]  # CUDA_VISIBLE_DEVICES entries; () = this slot's jobs see no GPU
    cpus: Tuple[int, ...]  # the cores this slot's jobs may run on

    def describe(self) -> str:
        gpus = f"GPU {','.join(self.gpus)}" if self.gpus else "no GPU"
        return f"slot {self.index}: {gpus}, cores {core_ranges(self.cpus)}"


def core_ranges(cores: Sequence[int]) -> str:
    """``0-3,8`` for [0, 1, 2, 3, 8]."""
    out, run = [], []
    for c in sorted(cores):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def split_cores(cores: Sequence[int], parts: int) -> List[Tuple[int, ...]]:
    """``cores`` in ``parts`` contiguous, disjoint shares as equal as they can be (the first ones
    get the remainder)."""
    cores = sorted(cores)
    size, extra = divmod(len(cores), parts)
    shares, start = [], 0
    for k in range(parts):
        n = size + (1 if k < extra else 0)
        shares.append(tuple(cores[start:start + n]))
        start += n
    return shares


def plan_slots(gpu_ids: Sequence[str], cores: Sequence[int], gpus_per_job: Optional[int],
               max_parallel: Optional[int], gpus_from: str = "NVML") -> List[Slot]:
    """The slots for ``hydra.launcher.gpus_per_job`` and ``hydra.launcher.max_parallel``.

    ``gpus_per_job=None`` means 1 where GPUs are visible and 0 (CPU jobs) where none are; a number
    above 0 with no GPU visible is refused (it cannot be honoured). With GPUs, ``max_parallel``
    defaults to as many jobs as the GPUs allow (``len(gpu_ids) // gpus_per_job``) and may not exceed
    it (jobs sharing a GPU would measure each other). With ``gpus_per_job=0`` jobs run on the CPU:
    ``max_parallel`` defaults to 1 and may be raised up to one job per core. ``gpus_from`` says where
    ``gpu_ids`` came from (``NVML``, or the sweep's ``CUDA_VISIBLE_DEVICES=...``), for the messages.
    """
    if gpus_per_job is None:
        gpus_per_job = 1 if gpu_ids else 0
    if gpus_per_job < 0:
        raise ConfigError(f"hydra.launcher.gpus_per_job={gpus_per_job} must be >= 0 (0 = jobs on the CPU)")
    if max_parallel is not None and max_parallel < 1:
        raise ConfigError(f"hydra.launcher.max_parallel={max_parallel} must be >= 1, or null for as many as the "
                          "GPUs allow")
    if not cores:
        raise ConfigError("no CPU core is available to this process (its CPU affinity is empty)")
    if gpus_per_job > 0 and not gpu_ids:
        seen = "NVML finds no GPU" if gpus_from == "NVML" else gpus_from
        raise ConfigError(f"hydra.launcher.gpus_per_job={gpus_per_job} but this sweep sees no GPU ({seen}); "
                          "set hydra.launcher.gpus_per_job=0 to run the jobs on the CPU")
    on_gpus = gpus_per_job > 0
    if on_gpus:
        fits = len(gpu_ids) // gpus_per_job
        if fits == 0:
            raise ConfigError(f"hydra.launcher.gpus_per_job={gpus_per_job} but {len(gpu_ids)} GPU(s) are visible "
                              f"({','.join(gpu_ids)}): lower gpus_per_job")
        parallel = fits if max_parallel is None else max_parallel
        if parallel > fits:
            raise ConfigError(f"hydra.launcher.max_parallel={parallel} jobs of {gpus_per_job} GPU(s) need "
                              f"{parallel * gpus_per_job} GPUs but {len(gpu_ids)} are visible "
                              f"({','.join(gpu_ids)}): jobs never share a GPU; lower max_parallel (or leave it "
                              "unset: as many as the GPUs allow)")
    else:
        parallel = 1 if max_parallel is None else max_parallel
    if parallel > len(cores):
        raise ConfigError(f"hydra.launcher.max_parallel={parallel} but this sweep may use {len(cores)} CPU core(s): "
                          "each job needs at least one core of its own; lower max_parallel")
    shares = split_cores(cores, parallel)
    return [Slot(k, tuple(gpu_ids[k * gpus_per_job:(k + 1) * gpus_per_job]) if on_gpus else (), shares[k])
            for k in range(parallel)]

