"""Device-resident random batches for ``dataset=synthetic``: the model alone, no input pipeline."""
from __future__ import annotations

import torch


class SyntheticLoader:
    """Yields a few fixed random batches (already on the device) round-robin, ``steps`` per epoch."""

    DISTINCT = 4  # a handful of distinct batches: no cache effects from one repeated tensor

    def __init__(self, spec, device: torch.device, batch_size: int, seed: int, channels_last: bool) -> None:
        g = torch.Generator(device="cpu").manual_seed(seed)
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        shape = (batch_size, 3, spec.image_size, spec.image_size)
        self.batches = [
            (torch.randn(shape, generator=g).to(device).contiguous(memory_format=fmt),
             torch.randint(0, spec.num_classes, (batch_size,), generator=g).to(device))
            for _ in range(self.DISTINCT)]
        self.steps = max(1, spec.synthetic_samples // batch_size)

    def __len__(self) -> int:
        return self.steps

    def describe(self) -> str:
        return f"synthetic  {self.DISTINCT} device-resident random batches (no input pipeline)"

    def set_epoch(self, epoch: int) -> None:
        pass  # fixed batches: nothing to reshuffle

    def __iter__(self):
        for i in range(self.steps):
            yield self.batches[i % self.DISTINCT]
