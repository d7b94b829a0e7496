"""``train.ema_decay``: an exponential moving average of the weights, through torch's AveragedModel.

torch's ``AveragedModel.update_parameters`` tests its device-side counter with ``bool()`` every
step, a host synchronisation on CUDA; ``DeviceEMA`` keeps the count in Python as well, so an update
is only device work (``get_ema_multi_avg_fn``'s foreach lerp). Its state dict is AveragedModel's.
"""
from __future__ import annotations

import itertools
from typing import Optional

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


class DeviceEMA(AveragedModel):
    """``ema = decay * ema + (1 - decay) * weights`` after each step; the first update copies the weights."""

    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        super().__init__(model, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)
        self.decay, self.count = decay, 0

    @torch.no_grad()
    def update_parameters(self, model: torch.nn.Module) -> None:
        mine = list(itertools.chain(self.module.parameters(), self.module.buffers()))
        theirs = [t.detach() for t in itertools.chain(model.parameters(), model.buffers())]
        if self.count == 0:
            torch._foreach_copy_(mine, theirs)
        else:
            floats = [i for i, t in enumerate(mine) if t.is_floating_point()]
            self.multi_avg_fn([mine[i] for i in floats], [theirs[i] for i in floats], None)
            others = [i for i, t in enumerate(mine) if not t.is_floating_point()]  # counters: BatchNorm's steps
            if others:
                torch._foreach_copy_([mine[i] for i in others], [theirs[i] for i in others])
        self.count += 1
        self.n_averaged.fill_(self.count)  # a device fill from a Python int: no synchronisation

    def describe(self) -> str:
        return f"EMA of the weights (decay {self.decay}): its metrics count"

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        result = super().load_state_dict(state_dict, strict=strict, assign=assign)
        self.count = int(self.n_averaged.item())  # once, on resume
        return result


def build_ema(model: torch.nn.Module, decay: Optional[float]) -> Optional[DeviceEMA]:
    """The average of ``model`` (a copy on its device, buffers averaged too), or None when off."""
    return None if decay is None else DeviceEMA(model, decay)
