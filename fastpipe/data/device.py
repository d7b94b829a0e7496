"""Device-side batch preparation shared by every loader: copy, normalise, channels_last.

A batch is ``(inputs, targets)``, each a tensor or a tuple / dict of them, moved to the training
device as it is. Image loaders hand over uint8 NCHW images (4x fewer bytes than float to move and
pin); the float conversion and ImageNet normalisation run on the training device.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

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


def to_device(value: Any, device: torch.device) -> Any:
    """``value`` (a tensor, or a tuple / list / dict of them) on ``device``; other leaves unchanged."""
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, (tuple, list)):
        return type(value)(to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


def head(value: Any, n: int) -> Any:
    """The first ``n`` samples of a batch structure (copies, so the batch itself can be freed)."""
    if isinstance(value, torch.Tensor):
        return value[:n].clone()
    if isinstance(value, (tuple, list)):
        return type(value)(head(v, n) for v in value)
    if isinstance(value, dict):
        return {k: head(v, n) for k, v in value.items()}
    return value


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


class ImagePrep:
    """(uint8 images, labels) on the host -> (normalised float images, labels) on the device."""

    def __init__(self, normalizer: Normalizer) -> None:
        self.normalize, self.device = normalizer, normalizer.device

    def __call__(self, batch):
        images, labels = batch
        return self.normalize(images), labels.to(self.device, non_blocking=True)


class MovePrep:
    """Any (inputs, targets) batch, moved to the device as it is."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def __call__(self, batch):
        inputs, targets = batch
        return to_device(inputs, self.device), to_device(targets, self.device)


class DeviceLoader:
    """Wraps a host-side iterable of (inputs, targets): yields batches prepared on the device by
    ``prepare`` (an ImagePrep, a MovePrep, or a loader's own transform).

    On CUDA the next batch is copied and prepared on a side stream while the current step runs,
    so the step never waits on a host-to-device copy.
    """

    def __init__(self, loader, prepare: Callable, sampler=None, description: str = "") -> None:
        self.loader = loader
        self.description = description
        self.prepare = prepare
        self.sampler = sampler
        self.stream = torch.cuda.Stream() if prepare.device.type == "cuda" else None
        self._early = None  # (epoch, the host iterator started ahead by start_early)

    def __len__(self) -> int:
        return len(self.loader)

    def describe(self) -> str:
        return self.description

    def start_early(self, epoch: int) -> None:
        """Start reading ``epoch`` now (a DataLoader forks its workers, which read ahead) while the run
        still sets up, so that its first step does not wait for them; iterating that epoch uses it."""
        self.set_epoch(epoch)
        self._early = (epoch, iter(self.loader))

    def set_epoch(self, epoch: int) -> None:
        if self._early is not None and self._early[0] != epoch:
            self._early = None
        if self.sampler is not None and hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def skip_next(self, batches: int) -> bool:
        """Resume: the next epoch starts ``batches`` in, unread. False: the sampler cannot skip."""
        self._early = None  # read from the epoch's start: not this epoch's batches
        if not hasattr(self.sampler, "skip_next"):
            return False
        self.sampler.skip_next(batches * self.loader.batch_size)
        return True

    def __iter__(self) -> Iterator[tuple]:
        host, self._early = (self._early[1] if self._early is not None else iter(self.loader)), None
        if self.stream is None:
            for batch in host:
                yield self.prepare(batch)
            return
        current = torch.cuda.current_stream()
        pending, batches = None, iter(host)
        while True:
            # Taken on the side stream too: a host loader that makes its batches on the GPU (a DALI
            # pipeline) binds them to the stream current when they are taken, the one preparing them.
            with torch.cuda.stream(self.stream):
                batch = next(batches, None)
                if batch is None:
                    break
                ready = self.prepare(batch)
            if pending is not None:
                yield pending
            # The consumer's stream must wait for the copy, and the tensors must not be freed
            # while the side stream still writes them.
            current.wait_stream(self.stream)
            for t in tensors(ready):
                t.record_stream(current)
            pending = ready
        if pending is not None:
            yield pending
