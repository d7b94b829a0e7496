"""Batch structures: a batch's inputs or targets are a tensor, or a tuple / list / dict of them (other
leaves pass through); moving, cutting and filling them up alike, sample by sample along the first
dimension.

Samples into a batch: torch's ``default_collate`` or the project's ``dataset.collate_fn``, with a
failure that names the part at fault.

A batch that cannot be formed says which dataset and split, and why: samples whose shapes differ
(``default_collate`` cannot stack them, and says only "stack expects each tensor to be equal
size"), samples of a type it cannot batch, or the collate_fn's own error with its own message. The
message is the exception's text, so it survives a DataLoader worker, where torch keeps only the
text of an exception ("Caught ValueError in DataLoader worker process 0" and its traceback).
"""
from __future__ import annotations

import functools
import traceback
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
from torch.utils.data import default_collate

from fastpipe.errors import FastpipeError, ProjectError


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


def callable_name(fn) -> str:
    """``pkg.module.function`` of ``fn`` (a partial's function), for messages."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{module}.{name}" if module else name


class NamedCollate:
    """``collate_fn`` (None: torch's default) for ``split`` of ``dataset``; picklable for DataLoader workers."""

    def __init__(self, collate_fn: Optional[Callable], dataset: str, split: str) -> None:
        self.fn, self.dataset, self.split = collate_fn or default_collate, dataset, split
        self.project = collate_fn is not None

    def __call__(self, samples: list, indices: Optional[Sequence[int]] = None):
        """The batch of ``samples``; ``indices``: their indices in the split, when known (for the message)."""
        try:
            return self.fn(samples)
        except FastpipeError:
            raise
        except Exception as exc:
            raise self.explain(samples, exc, indices) from exc

    def explain(self, samples: list, exc: Exception, indices: Optional[Sequence[int]] = None) -> ProjectError:
        """The error naming the part at fault for ``exc``, raised by collating ``samples``."""
        from fastpipe.data.splits import describe_value

        text = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"
        where = f"dataset={self.dataset}'s {self.split} split"
        if self.project:
            return ProjectError(f"dataset.collate_fn={callable_name(self.fn)} failed on a batch of {len(samples)} "
                                f"samples of {where}: {text}; fix the collate_fn (it takes a list of (input, target) "
                                "samples and returns the batch's (inputs, targets))",
                                metrics={"traceback": traceback.format_exc()})
        shapes = [describe_value(s) for s in samples]
        other = next((i for i, s in enumerate(shapes) if s != shapes[0]), None)
        name = (lambda i: f"sample {indices[i]}") if indices is not None else (lambda i: f"sample {i + 1} of the batch")
        if other is not None:
            return ProjectError(f"{where} gives samples of different shapes, which torch's default collate cannot "
                                f"stack into a batch: {name(0)} is {shapes[0]}, {name(other)} is {shapes[other]}; "
                                "give every sample one shape (resize, crop or pad in the dataset), or set "
                                "dataset.collate_fn to a function that pads them")
        return ProjectError(f"{where} gives samples that torch's default collate cannot batch ({text}; {name(0)} is "
                            f"{shapes[0]}); return tensors, numbers, or tuples / dicts of them from __getitem__, or "
                            "set dataset.collate_fn")
