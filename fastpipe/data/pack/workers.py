"""A JPEG pack's batches decoded in worker processes (data.decoder=cpu with data.decode_workers > 0),
straight into a ring of batch buffers the training process set up once.

Each batch is cut into one part a worker; each worker opens the pack itself (nothing large crosses a
process boundary), gathers its part's JPEG files and decodes them with libjpeg-turbo (torchvision)
into its rows of a ring slot, then reports the part done. The ring is shared memory, page-locked once
for the GPU where the run trains on CUDA (``cudaHostRegister``), so a decoded batch reaches the
training process without a copy, a mapping or a pinning of its own: on one H200 the hand-over of a
fresh 50 MB shared-memory batch (how torch's DataLoader returns a worker's batch) slowed the training
step by 2-24 %, where the same decoding with nothing handed over slowed it by none (docs/performance.md,
"What slows the step beside a decoder"). Unlike decoding threads inside the training process, the
workers share no interpreter lock with the loop that launches the step's kernels. With
data.decode_affinity they run beside the first TRAINING_CORES physical cores of each local rank.
"""
from __future__ import annotations

import atexit
import multiprocessing
import os
import queue
import time
import weakref
from collections import deque
from pathlib import Path
from typing import Iterator, List, Optional

import numpy as np
import torch

from fastpipe.config.data import TRAINING_CORES
from fastpipe.data.pack.shards import PackSet, pack_version
from fastpipe.data.pack.worker_loop import POLL_S, work
from fastpipe.errors import DataError, EnvironmentProblem
from fastpipe.machine import cpu_list_text, cpus_beyond

SHM = Path("/dev/shm")  # where the ring lives (Linux)


class DecodingWorkers:
    """``iterate(batches)``: the batches of one epoch, in order, decoded by ``workers`` processes that
    stay up across epochs, ``prefetch`` batches ahead. A yielded batch's images are a ring slot, valid
    until the batch after the next is asked for (and on CUDA until the copy queued from it by then has run)."""

    def __init__(self, packs: PackSet, workers: int, batch_size: int, prefetch: int, pin: bool,
                 affinity: bool, dist) -> None:
        self.packs, self.workers, self.pin = packs, workers, pin
        self.cpus = cpus_beyond(TRAINING_CORES * dist.local_world_size, dist.local_world_size,
                                dist.local_rank) if affinity else None
        self.ahead = max(1, prefetch)
        slots = self.ahead + 3  # decoding or ready, the one handed out, the one before it, one whose copy may run
        h, w = packs.stored
        _check_shared_memory(slots, batch_size * 3 * h * w)
        self.ring = torch.empty((slots, batch_size, 3, h, w), dtype=torch.uint8).share_memory_()
        # The training process is itself spawned, so its default start method is spawn, which re-imports
        # torch and fastpipe in every worker. The workers never touch CUDA: fork is safe.
        ctx = torch.multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
        self.tasks, self.results = ctx.Queue(), ctx.Queue()
        self.procs = [ctx.Process(target=work, name=f"fastpipe-decode-{i}", daemon=True,
                                  args=(packs.path, pack_version(packs.path), self.ring, self.tasks, self.results,
                                        self.cpus, os.getpid())) for i in range(workers)]
        self.locked: list = []  # the ring once page-locked, for _close to unlock
        self._finalizer = weakref.finalize(self, _close, self.procs, self.tasks, self.locked)
        # The workers ignore SIGTERM, so multiprocessing's own exit hook (SIGTERM, then a join without a
        # limit) cannot end them: this one, registered later, runs before it.
        self._finalizer.atexit = False
        atexit.register(self._finalizer)
        for p in self.procs:
            p.start()
        if pin:  # after the fork: the workers need no CUDA
            _page_lock(self.ring)
            self.locked.append(self.ring)
        self.busy = [0] * slots  # parts still being decoded into each slot, of any generation
        self.held: List[Optional[object]] = [None] * slots  # None (free), "given" or the event of a copy from it
        self.owner = [0] * slots  # the generation (epoch) a "given" slot was handed out in
        self.generation = 0

    def describe(self) -> str:
        where = f" on CPUs {cpu_list_text(self.cpus)}" if self.cpus else ""
        return f"decoder=cpu ({self.workers} worker process{'es' if self.workers != 1 else ''}{where})"

    def iterate(self, batches: List[np.ndarray]) -> Iterator[tuple]:
        self.generation += 1
        generation, todo = self.generation, deque(enumerate(batches))
        for slot, held in enumerate(self.held):  # an earlier epoch's iterator left unclosed: its slots go back
            if isinstance(held, str):
                self.held[slot] = _copied_event()
        sent: deque = deque()  # (seq, slot, idx) in order
        given: deque = deque()  # the slots handed out last, newest at the right
        try:
            while todo or sent:
                while todo and len(sent) < self.ahead:
                    slot = self._free_slot()
                    if slot is None and sent:
                        break  # the next batch first
                    if slot is None:
                        self._wait_for_a_slot(generation)
                        continue
                    seq, idx = todo.popleft()
                    self._send(generation, seq, slot, idx)
                    sent.append((seq, slot, idx))
                seq, slot, idx = sent[0]
                while self.busy[slot]:
                    self._collect(generation)
                sent.popleft()
                self._check_alive()  # a worker killed while idle: the others would hide it
                self._release(given, generation, keep=1)
                given.append(slot)
                self.held[slot], self.owner[slot] = "given", generation
                labels = torch.from_numpy(self.packs.labels(idx))
                yield self.ring[slot, :len(idx)], (labels.pin_memory() if self.pin else labels)
        finally:
            self._release(given, generation, keep=0)

    def _release(self, given: deque, generation: int, keep: int) -> None:
        """All but the newest ``keep`` slots handed out in ``generation`` go back, each once the copy the
        consumer queued from it (on the CUDA stream current when the next batch was asked for) has run.
        (When an iterator is left early its last copies feed a batch that is never used.)"""
        while len(given) > keep:
            slot = given.popleft()
            if self.held[slot] == "given" and self.owner[slot] == generation:  # not taken back by a later epoch
                self.held[slot] = _copied_event()

    def _send(self, generation: int, seq: int, slot: int, idx: np.ndarray) -> None:
        parts = [p for p in np.array_split(np.arange(len(idx)), min(self.workers, len(idx))) if len(p)]
        self.busy[slot] = len(parts)
        for rows in parts:
            self.tasks.put((generation, seq, slot, int(rows[0]), idx[rows[0]:rows[-1] + 1]))

    def _collect(self, generation: int) -> None:
        """One part's report: its slot one part nearer free; an error of this epoch raised."""
        while True:
            try:
                gen, seq, slot, error = self.results.get(timeout=POLL_S)
                break
            except queue.Empty:
                self._check_alive()
        self.busy[slot] -= 1
        if error is not None and gen == generation:
            raise DataError(error)

    def _free_slot(self) -> Optional[int]:
        """A slot no part decodes into, the consumer does not hold and no copy reads; None if none is."""
        for slot, held in enumerate(self.held):
            if held is not None and not isinstance(held, str) and held.query():
                self.held[slot] = held = None
            if held is None and not self.busy[slot]:
                return slot
        return None

    def _wait_for_a_slot(self, generation: int) -> None:
        """Nothing of this epoch in flight and no slot free: the oldest copy finished, or a part of an
        epoch left early reported."""
        copying = [s for s, h in enumerate(self.held) if h is not None and not isinstance(h, str)]
        if copying:
            self.held[copying[0]].synchronize()
            self.held[copying[0]] = None
        else:
            self._collect(generation)

    def _check_alive(self) -> None:
        dead = [p for p in self.procs if not p.is_alive()]
        if dead:
            code = dead[0].exitcode
            how = (f"was killed by signal {-code} (the out-of-memory killer, most often)" if code is not None
                   and code < 0 else f"exited with code {code}")
            raise EnvironmentProblem(f"a JPEG decode worker process ({dead[0].name}) {how}; lower "
                                     "data.decode_workers, or set data.decode_workers=0 to decode in threads")

    def close(self) -> None:
        self._finalizer()


def _copied_event():
    """An event on the current CUDA stream, after the consumer's copies; None off CUDA (nothing runs later)."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    event = torch.cuda.Event()
    event.record()
    return event


def _page_lock(ring: torch.Tensor) -> None:
    """Page-lock the ring for asynchronous copies to the GPU, or one line: a refusal leaves CUDA's last
    error set, which the next kernel launch would report as its own."""
    err = int(torch.cuda.cudart().cudaHostRegister(ring.data_ptr(), ring.numel(), 0))
    if err != 0:
        raise EnvironmentProblem(f"data.decode_workers: CUDA could not page-lock the decoded batches' "
                                 f"{ring.numel() / 2**20:,.0f} MB (CUDA error {err}; a container's locked-memory "
                                 "limit, ulimit -l?); raise that limit, or set data.pin_memory=false")


def _close(procs, tasks, locked: list) -> None:
    """Stop the workers (told first, killed if still up 3 s later: a worker that died holding the task
    queue's lock leaves the others unable to read), then unlock the ring."""
    started = [p for p in procs if p.pid is not None]
    for _ in started:
        tasks.put(None)
    deadline = time.monotonic() + 3
    for p in started:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in started:
        if p.is_alive():
            p.kill()
            p.join()
    if locked and torch.cuda.is_initialized():
        try:
            torch.cuda.synchronize()  # no copy may still read the ring
            torch.cuda.cudart().cudaHostUnregister(locked[0].data_ptr())
        except RuntimeError:  # CUDA already gone (the process is ending after a CUDA error): nothing to undo
            pass


def _check_shared_memory(batches: int, batch_bytes: int) -> None:
    """Refuse in one line a ring of ``batches`` that /dev/shm (a container's is 64 MB unless told otherwise)
    has no room for now (other loaders' rings, other ranks' included)."""
    try:
        st = os.statvfs(SHM)
    except OSError:
        return  # no /dev/shm: torch shares through files elsewhere
    need, free = batches * batch_bytes, st.f_bavail * st.f_frsize
    if need > free:
        raise EnvironmentProblem(f"data.decode_workers keeps about {_megabytes(need)} of decoded batches in "
                                 f"{SHM}, which has {_megabytes(free)} free: give the container more (docker run "
                                 "--shm-size), or lower data.prefetch or train.batch_size, or set data.decode_workers=0 "
                                 "(threads, no shared memory)")


def _megabytes(n: float) -> str:
    """``n`` bytes in MB, with a digit that is not 0 below 10 MB: ``350 MB``, ``0.06 MB``."""
    mb = n / 2**20
    return f"{mb:,.0f} MB" if mb >= 10 else f"{mb:.2g} MB"
