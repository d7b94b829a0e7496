"""The process group a job's ranks train in: joined as the environment describes it (runtime.py reads
it), rank 0's values passed to every rank, left after a successful job."""
from __future__ import annotations

from datetime import timedelta

from fastpipe.runtime import Dist, dist_from_env, resolve_device


def init_distributed(settings) -> Dist:
    """Join the process group the environment describes (elastic workers, torchrun/srun ranks).

    Binds this process to its GPU (LOCAL_RANK) first, then ``init_process_group`` with the resolved
    backend and ``launcher.timeout_s``, so a rank that vanishes fails the others' collectives
    instead of hanging them. A no-op for one process or when the group exists already.
    """
    import torch
    dist = dist_from_env()
    if dist.world_size == 1 or torch.distributed.is_initialized():
        return dist
    device = resolve_device(settings.device, dist)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = settings.launcher.backend_for(device.type)
    timeout = timedelta(seconds=settings.launcher.timeout_s)
    device_id = device if backend == "nccl" else None  # NCCL: bind the communicator to this GPU now
    torch.distributed.init_process_group(backend, timeout=timeout, device_id=device_id)
    return dist


def broadcast_from_main(value):
    """Rank 0's ``value`` on every rank (a picklable object); the value itself for one process."""
    import torch
    if not torch.distributed.is_initialized():
        return value
    box = [value]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def shutdown_distributed() -> None:
    """Leave the process group (after a successful job; a failing process just exits)."""
    import torch
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
