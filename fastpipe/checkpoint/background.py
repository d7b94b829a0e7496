"""Checkpoints that do not stall training: a snapshot to (pinned) host memory on the training thread,
the write, fsync and SHA-256 on a background thread.

The training thread only queues device-to-host copies of every tensor into buffers it reuses from
one checkpoint to the next (pinned on CUDA, so the copies are asynchronous and ordered before the
next step's updates on the same stream) and records an event; the writer thread waits for that
event, then writes the file exactly as checkpoint/files.py does (temporary file, fsync, sidecar with
size and SHA-256, rename) and rotates old ones. The weights files (best.pt, last.pt) are written the
same way, without rotation, and never become the checkpoint a resume starts from. Writes run one at
a time, in the order they were submitted. Step checkpoints and weights files have buffers of their
own (pinning host memory costs time, so there are only these two sets), and a snapshot waits only
for a write still reading its own set. A stop signal, the end of the run and a failure wait for
every write in flight, so every guarantee of a synchronous save holds when the run ends.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Dict, Optional

import torch

from fastpipe.checkpoint.disk import NAME, rotate, write_checkpoint


class HostSnapshot:
    """Copies a state dict's tensors into host buffers kept between snapshots (same paths, shapes).
    Tensors that alias one another (a GPT's tied embedding and output head) share one copy, so the
    file stores them once, as torch.save of the live state would."""

    def __init__(self) -> None:
        self.buffers = {}

    def take(self, state):
        """The same structure with every tensor a host copy (queued, not yet complete on CUDA)."""
        return self._take(state, (), {})

    def _take(self, state, path, seen: dict):
        if isinstance(state, torch.Tensor):
            alias = (state.device, state.untyped_storage().data_ptr(), state.storage_offset(), tuple(state.shape),
                     tuple(state.stride()), state.dtype)
            if alias in seen:
                return seen[alias]
            buffer = self.buffers.get(path)
            if (buffer is None or buffer.shape != state.shape or buffer.dtype != state.dtype
                    or buffer.stride() != _layout(state)):
                pin = state.is_cuda and torch.cuda.is_available()
                # the tensor's own strides (channels_last weights and their optimizer state stay NHWC)
                buffer = self.buffers[path] = torch.empty_strided(state.shape, _layout(state), dtype=state.dtype,
                                                                  device="cpu", pin_memory=pin)
            seen[alias] = buffer.copy_(state.detach(), non_blocking=state.is_cuda)
            return seen[alias]
        if isinstance(state, dict):
            return {k: self._take(v, path + (k,), seen) for k, v in state.items()}
        if isinstance(state, (list, tuple)):
            return type(state)(self._take(v, path + (i,), seen) for i, v in enumerate(state))
        return state


def _layout(tensor: torch.Tensor) -> tuple:
    """The strides a host copy of ``tensor`` gets: its own when it is channels_last, else contiguous ones."""
    if tensor.dim() == 4 and tensor.is_contiguous(memory_format=torch.channels_last) and not tensor.is_contiguous():
        return tuple(tensor.stride())
    strides, step = [], 1
    for size in reversed(tensor.shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


class BackgroundWriter:
    """Checkpoint writes off the training thread, one at a time in order; a failed write's error surfaces
    at the next checkpoint or ``wait``."""

    def __init__(self, folder: Path, keep: int, on_written: Optional[Callable[[int, Path], None]] = None) -> None:
        self.folder, self.keep, self.on_written = folder, keep, on_written  # on_written(step, path) once complete
        self.snapshots: Dict[str, HostSnapshot] = {}  # one per kind of file: "step", "weights"
        self._reading: Dict[str, threading.Thread] = {}  # the newest write reading each kind's buffers
        self._thread: Optional[threading.Thread] = None  # the newest write; it starts after the one before
        self._error: Optional[BaseException] = None
        self.written: Optional[Path] = None  # the newest complete checkpoint this writer wrote
        self.write_s = []  # seconds each write took in the background

    def submit(self, state: dict, name: Optional[str] = None, copy: bool = True) -> dict:
        """Snapshot ``state`` now and write it in the background (after the writes before it): a step
        checkpoint, or with ``name`` a weights file ``NAME.pt``. ``copy=False``: ``state`` is already a
        private host copy (FSDP's gathered weights), written as it is. Either waits for the write of
        its kind before it: one still reads the buffers a snapshot reuses, and a private copy is held
        in memory until written. Returns the host copy (valid until the next snapshot of its kind)."""
        self._raise_failed()
        kind = "step" if name is None else "weights"
        reading = self._reading.get(kind)
        if reading is not None:
            reading.join()
        host = self.snapshots.setdefault(kind, HostSnapshot()).take(state) if copy else state
        self._queue(host, name, kind)
        return host

    def submit_again(self, host: dict, name: str) -> None:
        """Write ``host``, a weights host copy ``submit`` returned (its snapshot not yet replaced), as
        ``NAME.pt`` too: no snapshot and no wait (last.pt at the step of the best.pt just written)."""
        self._raise_failed()
        self._queue(host, name, "weights")

    def _queue(self, host: dict, name: Optional[str], kind: str) -> None:
        done = torch.cuda.Event() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        if done is not None:
            done.record()  # the copies are queued on this stream: the writer waits for them, not the trainer

        def write() -> Path:
            if done is not None:
                done.synchronize()
            return write_checkpoint(self.folder, host, name=name)

        self._reading[kind] = self.run(write, step_checkpoint=name is None)

    def run(self, publish: Callable[[], Path], step_checkpoint: bool = True) -> threading.Thread:
        """Run ``publish`` (which makes one file complete and returns its path) in the background, after
        the writes before it; a step checkpoint's (the sharded ones' publication too: checkpoint/dcp.py)
        then rotates and becomes ``written``. Returns the write's thread. A write that failed before
        (a full disk) is raised here, at the next checkpoint, as it would be by ``wait``."""
        self._raise_failed()
        self._thread = threading.Thread(target=self._write, args=(publish, step_checkpoint, self._thread),
                                        name="fastpipe-checkpoint", daemon=False)
        self._thread.start()
        return self._thread

    def _raise_failed(self) -> None:
        """Raise the first error of a write already finished, if one failed (no waiting)."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _write(self, publish: Callable[[], Path], step_checkpoint: bool,
               before: Optional[threading.Thread]) -> None:
        if before is not None:  # one write at a time, in order: rotation never races a later file
            before.join()
        start = time.perf_counter()
        try:
            path = publish()
            if not step_checkpoint:  # best.pt / last.pt: no rotation, no resume from it
                return
            rotate(self.folder, self.keep)
            self.written = path
            if self.on_written is not None:
                match = NAME.match(Path(path).name)
                self.on_written(int(match.group(1)) if match else 0, Path(path))
        except BaseException as exc:  # e.g. a full disk: raised on the training thread at the next wait
            if self._error is None:  # the first one: a later write usually fails for the same reason
                self._error = exc
        finally:
            if step_checkpoint:  # checkpoint_stall_s's write_median: the step checkpoints'
                self.write_s.append(time.perf_counter() - start)

    def wait(self) -> None:
        """Until every write in flight is complete; raises the first error one had, if any."""
        if self._thread is not None:
            self._thread.join()  # the newest: it ran after all the others
            self._thread = None
            self._reading.clear()
        self._raise_failed()
