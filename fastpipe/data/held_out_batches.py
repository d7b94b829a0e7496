"""Held-out batches read once: the target's screening subset and the whole held-out split, kept where
the loader put them (the device) after a first whole pass, and given again at every later evaluation,
so that an evaluation costs the forward alone. Kept only while the device has room to spare: twice
the batches' bytes free, beside what the training step has already reserved. ``read_ahead`` makes
that first pass in a background thread while training runs (train.eval_read_ahead), so that no
evaluation waits on the loader. Kept batches also say how many samples they hold, which lets a screen
end as soon as the rest cannot change its outcome (train/target.py ``OutOfReach``).

``train.target_eval_samples``: which held-out samples the target's screening evaluations read.

A dataset that exposes its labels (a ``targets`` attribute or method holding one integer class per
sample, as torchvision's ``ImageFolder`` and fastpipe's image datasets do; through a ``Subset``, the
labels of its indices) gets a class-balanced subset: every class the same share (classes with fewer
samples give all they have, the rest goes to the others), drawn within each class with the run's
seed. Any other dataset gets a seeded random subset. Either way the subset is drawn once and every
screening evaluation reads the same samples, as positions in the held-out split in a seeded random
order: a screen's first samples are then a random draw of its subset (an image folder's split is
listed class by class), which a screen's statistical early end relies on (train/target.py OutOfReach).
"""
from __future__ import annotations

import atexit
import contextlib
import threading
import weakref
from typing import Iterator, List, Optional, Sequence

import numpy as np
import torch
from torch.utils._pytree import tree_leaves, tree_map
from torch.utils.data import Subset


def batch_length(target) -> int:
    """Samples in a batch: the first dimension of the target (or of its first tensor)."""
    while isinstance(target, (tuple, list, dict)):
        target = next(iter(target.values())) if isinstance(target, dict) else target[0]
    return int(target.shape[0]) if isinstance(target, torch.Tensor) and target.dim() else 1


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


_reading: "weakref.WeakSet[KeptBatches]" = weakref.WeakSet()  # read ahead, not yet ended
_reading_lock = threading.Lock()
END_WAIT_S = 10.0  # how long stopping a read ahead waits for the batch its loader is reading


@atexit.register
def _stop_reads() -> None:
    # a thread still copying to the GPU as the interpreter finalizes can crash it
    with _reading_lock:
        loaders = list(_reading)
    stop_reading(*loaders)


class KeptBatches:
    """A held-out loader (the same samples every pass) whose batches are kept after one whole pass;
    any other attribute is the loader's."""

    def __init__(self, loader) -> None:
        self.loader = loader
        self.kept: Optional[List] = None
        self.kept_bytes = 0
        self.samples: Optional[int] = None  # in the kept batches, once kept
        self.refused = False  # the device had no room: read through the loader every time
        self._pending: Optional[threading.Event] = None  # set when its read ahead has ended
        self._failure: Optional[BaseException] = None
        self._stop = threading.Event()

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name):
        if "loader" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["loader"], name)

    def __iter__(self) -> Iterator:
        self._wait()
        if self.kept is not None:
            yield from self.kept
            return
        yield from self._pass()

    def settled(self) -> Optional[int]:
        """The samples kept, once a read ahead under way has ended (None: nothing kept)."""
        self._wait()
        return self.samples

    def _wait(self) -> None:
        """Wait for a read ahead under way; raise here what it raised."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.wait()
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _pass(self, stop: Optional[threading.Event] = None) -> Iterator:
        """One pass through the loader, keeping copies of its batches while there is room (``stop``:
        set to end the pass early, keeping nothing)."""
        keeping: Optional[List] = None if self.refused else []
        size = samples = 0
        for batch in self.loader:
            if stop is not None and stop.is_set():
                return
            if keeping is not None:
                size += batch_bytes(batch)
                samples += batch_length(batch[1])  # (inputs, targets), as every held-out loader gives
                device = next((t.device for t in tree_leaves(batch) if isinstance(t, torch.Tensor)), None)
                if device is None or free_bytes(device) < 2 * size:
                    keeping, self.refused = None, True
                else:
                    keeping.append(tree_map(_copy, batch))
            yield batch
        if keeping is not None:  # a whole pass (one left early keeps nothing yet)
            self.kept, self.kept_bytes, self.samples = keeping, size, samples

    def describe(self) -> str:
        return self.loader.describe()


def read_ahead(loaders: Sequence[KeptBatches], device: torch.device) -> None:
    """Make each loader's first pass now, one after another in one background thread (the first
    given is the first ready; one at a time, each judges its room after the ones before took theirs),
    on a CUDA stream of its own, so that the training step's stream never waits for its copies. An
    evaluation of a loader still being read waits for it, and what its read raised is raised there."""
    todo = [(k, threading.Event()) for k in loaders if k.kept is None and not k.refused and k._pending is None]
    if not todo:
        return
    for k, ended in todo:
        k._pending = ended
        with _reading_lock:
            _reading.add(k)
    threading.Thread(target=_read_all, args=(todo, device), name="fastpipe-held-out-read-ahead", daemon=True).start()


def stop_reading(*loaders: Optional[KeptBatches]) -> None:
    """End the read ahead of ``loaders`` still under way (they keep nothing): the run has ended. Waits
    at most ``END_WAIT_S`` for the batch a loader is reading."""
    for k in loaders:
        if isinstance(k, KeptBatches):
            k._stop.set()
    for k in loaders:
        pending = k._pending if isinstance(k, KeptBatches) else None
        if pending is not None:
            pending.wait(END_WAIT_S)


def _read_all(todo: List[tuple], device: torch.device) -> None:
    stream = None
    for k, ended in todo:
        try:
            if stream is None and device.type == "cuda":
                if device.index is not None:
                    torch.cuda.set_device(device)  # a new thread starts on device 0; a rank's loader is on its own
                stream = torch.cuda.Stream(device)
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                for _ in k._pass(k._stop):
                    if k.refused:
                        break  # no room: nothing would be kept
            if stream is not None:
                stream.synchronize()  # its copies done before it counts as kept: any stream may read them
        except BaseException as exc:  # raised again in the evaluation that waits for it
            k._failure = exc
        finally:
            with _reading_lock:
                _reading.discard(k)
            ended.set()


def labels_of(dataset) -> Optional[np.ndarray]:
    """One integer label per sample of ``dataset``, or None when it does not expose integer labels."""
    if isinstance(dataset, Subset):
        labels = labels_of(dataset.dataset)
        return None if labels is None else labels[np.asarray(dataset.indices, dtype=np.int64)]
    targets = getattr(dataset, "targets", None)
    if callable(targets):
        targets = targets()
    if targets is None:
        return None
    try:
        labels = np.asarray(targets)
    except (TypeError, ValueError):
        return None
    if labels.ndim != 1 or len(labels) != len(dataset) or not (
            np.issubdtype(labels.dtype, np.integer) or labels.dtype == bool):
        return None  # soft or multi-label targets, regression values: no classes to balance
    return labels.astype(np.int64)


def eval_subset(dataset, samples: int, seed: int) -> np.ndarray:
    """``samples`` positions of ``dataset`` (class-balanced when it exposes labels, else random),
    drawn with ``seed``, in a random order drawn with it. All of them, in order, when ``samples`` is
    not fewer than the dataset's."""
    n = len(dataset)
    if samples >= n:
        return np.arange(n)
    rng = np.random.default_rng([seed % 2**32, 0xE7A1])  # the run's seed, a stream of its own
    labels = labels_of(dataset)
    chosen = rng.choice(n, size=samples, replace=False) if labels is None else balanced(labels, samples, rng)
    return rng.permutation(chosen)


def balanced(labels: np.ndarray, samples: int, rng: np.random.Generator) -> np.ndarray:
    """``samples`` positions with every class's count as even as the classes' sizes allow: each
    class gets an equal quota (the remainder to classes in a random order); a class smaller than its
    quota gives all it has and its shortfall is shared out again."""
    classes, counts = np.unique(labels, return_counts=True)
    quota = np.zeros(len(classes), dtype=np.int64)
    left = samples
    while left > 0:
        open_ = np.flatnonzero(quota < counts)
        share, extra = divmod(left, len(open_))
        give = np.full(len(open_), share, dtype=np.int64)
        give[rng.permutation(len(open_))[:extra]] += 1
        give = np.minimum(give, counts[open_] - quota[open_])
        quota[open_] += give
        left -= int(give.sum())
    chosen = [rng.choice(np.flatnonzero(labels == c), size=k, replace=False) for c, k in zip(classes, quota) if k]
    return np.concatenate(chosen)
