"""The target's screening subset read once: its batches kept where the loader put them (the device)
after the first whole pass, and given again at every later screen, so that a screen costs the forward
alone. Kept only while the device has room to spare: twice the batches' bytes free, beside what the
training step has already reserved."""
from __future__ import annotations

from typing import Iterator, List, Optional

import torch
from torch.utils._pytree import tree_leaves, tree_map


def batch_bytes(batch) -> int:
    return sum(t.numel() * t.element_size() for t in tree_leaves(batch) if isinstance(t, torch.Tensor))


def free_bytes(device: torch.device) -> int:
    """Memory the device can still give out: CUDA's free memory outside the caching allocator's
    reserve; the host's MemAvailable."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return 0  # unknown: keep nothing


def _copy(x):
    # a loader may reuse its output buffers (DALI's, the decode workers' ring): what is kept is a copy
    return x.clone() if isinstance(x, torch.Tensor) else x


class KeptBatches:
    """A held-out loader (the screen's: the same samples every time) whose batches are kept after one
    whole pass; any other attribute is the loader's."""

    def __init__(self, loader) -> None:
        self.loader = loader
        self.kept: Optional[List] = None
        self.kept_bytes = 0
        self.refused = False  # the device had no room: read through the loader every time

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name):
        if "loader" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["loader"], name)

    def __iter__(self) -> Iterator:
        if self.kept is not None:
            yield from self.kept
            return
        keeping: Optional[List] = None if self.refused else []
        size = 0
        for batch in self.loader:
            if keeping is not None:
                size += batch_bytes(batch)
                device = next((t.device for t in tree_leaves(batch) if isinstance(t, torch.Tensor)), None)
                if device is None or free_bytes(device) < 2 * size:
                    keeping, self.refused = None, True
                else:
                    keeping.append(tree_map(_copy, batch))
            yield batch
        if keeping is not None:  # a whole pass (one left early keeps nothing yet)
            self.kept, self.kept_bytes = keeping, size

    def describe(self) -> str:
        return self.loader.describe()
