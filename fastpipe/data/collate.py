"""Samples into a batch: torch's ``default_collate`` or the project's ``dataset.collate_fn``, with a
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
from typing import Callable, Optional, Sequence

from torch.utils.data import default_collate

from fastpipe.errors import FastpipeError, ProjectError


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
