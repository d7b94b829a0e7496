"""Batch structures: a batch's inputs or targets are a tensor, or a tuple / list / dict of them (other
leaves pass through); moving, cutting and filling them up alike, sample by sample along the first
dimension."""
from __future__ import annotations

from typing import Any, Iterator

import torch


def to_device(value: Any, device: torch.device) -> Any:
    """``value`` (a tensor, or a tuple / list / dict of them) on ``device``; other leaves unchanged."""
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, (tuple, list)):
        return type(value)(to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


def head(value: Any, n: int, copy: bool = True) -> Any:
    """The first ``n`` samples of a batch structure (``copy``: copies, so the batch itself can be freed;
    else views)."""
    if isinstance(value, torch.Tensor):
        return value[:n].clone() if copy else value[:n]
    if isinstance(value, (tuple, list)):
        return type(value)(head(v, n, copy) for v in value)
    if isinstance(value, dict):
        return {k: head(v, n, copy) for k, v in value.items()}
    return value


def batch_first(value: Any, n: int) -> bool:
    """Whether every leaf of a structure is a tensor whose first dimension holds ``n`` samples."""
    if isinstance(value, torch.Tensor):
        return value.dim() > 0 and value.shape[0] == n
    if isinstance(value, (tuple, list, dict)):
        leaves = value.values() if isinstance(value, dict) else value
        return len(leaves) > 0 and all(batch_first(v, n) for v in leaves)
    return False


def filled_up(value: Any, filler: Any, n: int) -> Any:
    """``value``, a batch structure, filled up to ``n`` samples with the first samples of ``filler`` (a
    batch of the same structure: tensors of the same dtype, device and sample shape); None where the
    two differ. Each tensor keeps its memory format (channels_last stays so)."""
    if isinstance(value, torch.Tensor):
        if not (isinstance(filler, torch.Tensor) and value.dim() > 0 and filler.dim() == value.dim()
                and filler.shape[1:] == value.shape[1:] and value.shape[0] <= n <= value.shape[0] + filler.shape[0]
                and filler.dtype == value.dtype and filler.device == value.device):
            return None
        channels_last = value.dim() == 4 and value.is_contiguous(memory_format=torch.channels_last)
        out = torch.cat([value, filler[:n - value.shape[0]]])
        return out.contiguous(memory_format=torch.channels_last) if channels_last else out
    if isinstance(value, (tuple, list)) and isinstance(filler, (tuple, list)) and len(value) == len(filler):
        parts = [filled_up(v, f, n) for v, f in zip(value, filler)]
        return None if any(p is None for p in parts) else type(value)(parts)
    if isinstance(value, dict) and isinstance(filler, dict) and value.keys() == filler.keys():
        parts = {k: filled_up(v, filler[k], n) for k, v in value.items()}
        return None if any(p is None for p in parts.values()) else parts
    return None


def tensors(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor in a batch structure."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from tensors(v)
