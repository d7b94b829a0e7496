"""Device-side batch preparation shared by every loader: copy, normalise, channels_last.

A batch is ``(inputs, targets)``, each a tensor or a tuple / dict of them, moved to the training
device as it is. Image loaders hand over uint8 NCHW images (4x fewer bytes than float to move and
pin); the float conversion and ImageNet normalisation run on the training device.
"""
from __future__ import annotations

import contextlib
import threading
import types
import warnings
import weakref
from typing import Callable, Iterator

import torch

from fastpipe.data.batches import tensors, to_device
from fastpipe.errors import FastpipeWarning

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


class PassClosed(RuntimeError):
    """A pass that another thread read was ended by ``DeviceLoader.close`` (the run ended): what it read
    is not the whole split, so a reader keeps nothing of it."""


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
        self._reading = self._host = None  # weak references: the pass under way, its host iterator
        self._closed = threading.Event()  # the pass under way's: set by close()

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
        batches = self._prepared()
        self._reading = weakref.ref(batches)  # weak: a pass its reader dropped ends as it did
        return batches

    def close(self) -> None:
        """End reading now, at the run's end: the epoch started early and the pass under way, whose
        DataLoader workers stop at once (a failed run's traceback would keep them otherwise)."""
        early, self._early = self._early, None
        reading, self._reading = self._reading and self._reading(), None
        host, self._host = self._host and self._host(), None
        closed, self._closed = self._closed, threading.Event()
        closed.set()
        try:
            if reading is not None:
                reading.close()
        except ValueError:
            # A held-out read ahead runs this pass in its thread (its end was not waited for). Ending its
            # workers from here would leave that thread waiting for ever on a batch they no longer send
            # (torch marks them stopped, so it never sees a failure): the pass ends at its next batch, in
            # that thread, which ends its workers (_prepared).
            host = None
        finally:
            for iterator in (early and early[1], host):
                end_workers(iterator)

    def _prepared(self) -> Iterator[tuple]:
        host, self._early = (self._early[1] if self._early is not None else iter(self.loader)), None
        try:
            self._host = weakref.ref(host)
        except TypeError:  # an iterator without weak references (a generator has them; a list iterator not)
            self._host = None
        closed = self._closed
        try:
            yield from (self._on_host(host, closed) if self.stream is None else self._on_stream(host, closed))
            if closed.is_set():  # close() came while another thread ran this pass: not a whole pass
                raise PassClosed("the run ended while this pass was read")
        except Exception:
            self._end(host)  # the traceback keeps this iterator: its workers stop now
            raise

    def _end(self, host) -> None:
        end_workers(host)
        if getattr(self.loader, "_iterator", None) is host:  # persistent workers: the next pass starts anew
            self.loader._iterator = None

    def _on_host(self, host, closed: threading.Event) -> Iterator[tuple]:
        for batch in host:
            if closed.is_set():
                return
            yield self.prepare(batch)

    def _on_stream(self, host, closed: threading.Event) -> Iterator[tuple]:
        current = torch.cuda.current_stream()
        pending, batches = None, iter(host)
        while not closed.is_set():
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
        if pending is not None and not closed.is_set():
            yield pending


def end_workers(iterator) -> None:
    """Stop a DataLoader iterator's worker processes now, as its ``__del__`` would (a host generator:
    close it, so that what it holds is let go). A failed run's traceback keeps the iterator to a
    garbage collection, which frees it together with its queues: its workers never hear the stop, and
    torch waits 5 s for each before killing it. PyTorch has no public close for it; Lightning calls the
    same method when it tears a loader down."""
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if callable(shutdown):
        shutdown()
    elif isinstance(iterator, types.GeneratorType):
        with contextlib.suppress(ValueError):  # running in another thread: it ends with that thread
            iterator.close()


def _device_loader(loader) -> "DeviceLoader | None":
    """``loader``, or the loader a kept held-out loader wraps, where it is a DeviceLoader."""
    for candidate in (loader, getattr(loader, "__dict__", {}).get("loader")):
        if isinstance(candidate, DeviceLoader):
            return candidate
    return None


@contextlib.contextmanager
def reading_ends_with_the_run(*loaders):
    """On leaving (the run ended, failed or was stopped), ``close`` each of ``loaders`` that is (or
    wraps) a DeviceLoader; a close that fails is a warning, never the run's error."""
    try:
        yield
    finally:
        for loader in map(_device_loader, loaders):
            try:
                if loader is not None:  # not filter(None, ...): an empty loader's len() is 0
                    loader.close()
            except Exception as exc:
                warnings.warn(f"ending the data loader's reading at the run's end failed ({type(exc).__name__}: {exc}); "
                              "the run's result stands, and its workers end with the process", FastpipeWarning)
