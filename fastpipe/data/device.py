"""Device-side batch preparation shared by every loader: copy, normalise, channels_last.

Loaders hand over uint8 NCHW images (4x fewer bytes than float to move and pin); the float
conversion and ImageNet normalisation run on the training device, on the GPU when there is one.
"""
from __future__ import annotations

from typing import Iterator, Tuple

import torch

MEAN = (0.485, 0.456, 0.406)  # ImageNet statistics, as 0..1 fractions
STD = (0.229, 0.224, 0.225)


class Normalizer:
    """uint8 NCHW on any device -> normalised float32 NCHW on ``device``."""

    def __init__(self, device: torch.device, channels_last: bool) -> None:
        self.device = device
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        images = images.to(self.device, non_blocking=True)
        if images.dtype == torch.uint8:
            images = images.float().sub_(self.mean).div_(self.std)
        return images.contiguous(memory_format=self.memory_format)


class DeviceLoader:
    """Wraps a host-side iterable of (uint8 images, labels): yields normalised device batches.

    On CUDA the next batch is copied and normalised on a side stream while the current step runs,
    so the step never waits on a host-to-device copy.
    """

    def __init__(self, loader, normalizer: Normalizer, sampler=None, description: str = "") -> None:
        self.loader = loader
        self.description = description
        self.normalize = normalizer
        self.sampler = sampler
        self.stream = torch.cuda.Stream() if normalizer.device.type == "cuda" else None

    def __len__(self) -> int:
        return len(self.loader)

    def describe(self) -> str:
        return self.description

    def set_epoch(self, epoch: int) -> None:
        if self.sampler is not None and hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def skip_next(self, batches: int) -> bool:
        """Resume: the next epoch starts ``batches`` in, unread. False: the sampler cannot skip."""
        if not hasattr(self.sampler, "skip_next"):
            return False
        self.sampler.skip_next(batches * self.loader.batch_size)
        return True

    def _prepare(self, batch) -> Tuple[torch.Tensor, torch.Tensor]:
        images, labels = batch
        return self.normalize(images), labels.to(self.normalize.device, non_blocking=True)

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        if self.stream is None:
            for batch in self.loader:
                yield self._prepare(batch)
            return
        current = torch.cuda.current_stream()
        pending = None
        for batch in self.loader:
            with torch.cuda.stream(self.stream):
                ready = self._prepare(batch)
            if pending is not None:
                yield pending
            # The consumer's stream must wait for the copy, and the tensors must not be freed
            # while the side stream still writes them.
            current.wait_stream(self.stream)
            for t in ready:
                t.record_stream(current)
            pending = ready
        if pending is not None:
            yield pending
