"""``+shadow=KIND`` variants of decode_beside_step.py: the step trains from the raw pack while a thread
of the same process does one JPEG batch's KIND of work per training step and drops the result.

It tells which part of the JPEG pack's loading slows the step itself (as opposed to the loader
falling behind): if the raw pack's step slows with a shadow, that work interferes with it.

- ``gather``: the batch's JPEG files copied out of the pack's map (the host-side Python of the GPU path);
- ``nvjpeg``: gathered, then decoded through nvJPEG exactly as ``data.decoder=gpu`` does;
- ``decode``: one batch gathered once before, decoded through nvJPEG every step (nvJPEG alone);
- ``workers``: a batch decoded by ``data.decode_workers`` worker processes (8, on the CPUs
  ``data.decode_affinity`` gives them) into their ring, page-locked; ``workers-nopin`` not page-locked.
  (Before the ring, 2026-12-03's ``3-workers`` call at 9f5e5f5, these received each batch through a
  DataLoader, and ``workers-tiny`` had the workers send one pixel an image back.)
"""
from __future__ import annotations

import threading

import numpy as np
import torch

KINDS = ("gather", "nvjpeg", "decode", "workers", "workers-nopin")


class Shadow:
    """Call ``tick()`` once per training step; ``close()`` stops the thread (and its workers)."""

    def __init__(self, kind: str, jpeg_pack, batch: int, device: torch.device, seed: int = 0) -> None:
        from fastpipe.data.pack.jpeg import Decoder
        from fastpipe.data.pack.source import pack_files
        from fastpipe.data.pack.shards import PackSet

        if kind not in KINDS:
            raise SystemExit(f"+shadow={kind}: one of {', '.join(KINDS)}")
        self.kind, self.done, self.errors = kind, 0, []
        self.packs = PackSet(jpeg_pack)
        train = self.packs.indices(0)
        rng = np.random.default_rng(seed)
        self.batches = [np.sort(rng.choice(train, batch, replace=False)) for _ in range(64)]
        self._gather = lambda idx: pack_files(self.packs, idx)
        self.decoder = Decoder("gpu", device, self.packs.stored, 1, False) if device.type == "cuda" else \
            Decoder("cpu", device, self.packs.stored, 1, False)
        self.fixed = self._gather(self.batches[0])
        self.workers = None
        if kind.startswith("workers"):
            self.workers = _workers(kind, self.packs, batch)
            self._stream = iter(())
        self._ticks = threading.Semaphore(0)
        self._stop = False
        self.thread = threading.Thread(target=self._run, name="shadow", daemon=True)
        self.thread.start()

    def _one(self, i: int) -> None:
        idx = self.batches[i % len(self.batches)]
        if self.kind == "gather":
            self._gather(idx)
        elif self.kind == "nvjpeg":
            self.decoder(self._gather(idx))
        elif self.kind == "decode":
            self.decoder(self.fixed)
        else:  # workers*
            batch = next(self._stream, None)
            if batch is None:
                self._stream = self.workers.iterate(self.batches)
                batch = next(self._stream)

    def _run(self) -> None:
        i = 0
        while True:
            self._ticks.acquire()
            if self._stop:
                return
            try:
                self._one(i)
            except Exception as exc:  # noqa: BLE001 - reported with the row, the step goes on
                self.errors.append(repr(exc))
                return
            i += 1
            self.done = i

    def tick(self) -> None:
        self._ticks.release()

    def close(self) -> None:
        self._stop = True
        self._ticks.release()
        self.thread.join(timeout=60)
        self._stream = iter(())
        self.workers = None


def _workers(kind: str, packs, batch: int):
    """DecodingWorkers as data.decoder=cpu makes them (8 workers, affinity on), page-locked unless ``-nopin``."""
    from fastpipe.data.pack.workers import DecodingWorkers
    from fastpipe.runtime import Dist

    return DecodingWorkers(packs, 8, batch, 8, torch.cuda.is_available() and kind != "workers-nopin", True, Dist())
