"""Calling the loggers and callbacks off the training thread: one thread and queue per object.

The training thread only queues an event (a dict of numbers it already has on the host), so a slow
tracker never slows a step. Each object's events run in order on its own thread. A hook that raises is
warned about once (stderr, and metrics.json's warnings at the end) and the object is called no more:
the run goes on, and its results are never lost because a tracker is down. At the end the run waits for
each object's queue for as long as it makes progress, and gives up on one that has made none for its
``timeout_s`` (DEFAULT_TIMEOUT_S without one): a hung tracker costs the run's end that much at most. A
tracker still starting (importing its package, making its store or run: ``on_start``) when a short run
ends is waited for up to START_LIMIT_S, so that the run still reaches it.
"""
from __future__ import annotations

import dataclasses
import queue
import sys
import threading
import time
from typing import Dict, Iterable, List, Optional

from fastpipe.config.logger import Hook
from fastpipe.record.loggers import RunInfo, trackers_file

DEFAULT_TIMEOUT_S = 10.0
START_LIMIT_S = 120.0  # the longest a tracker's start may take before the run's end gives up on it
SAY_WAITING_S = 3.0  # a run's end that waits longer says for whom
_STOP = object()


def _say(line: str) -> None:
    """A line on stderr on a line of its own, above the progress bar (tqdm clears and redraws it)."""
    from tqdm import tqdm

    tqdm.write(line, file=sys.stderr)


def _one_line(exc: BaseException) -> str:
    """The error on one line, all of it (a reason may run over several: Hydra's blocked targets' does), cut
    at 500 characters."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:500]


class _Worker:
    """One logger's or callback's thread."""

    def __init__(self, hook: Hook, obj) -> None:
        self.hook, self.obj = hook, obj
        self.timeout_s = float(getattr(obj, "timeout_s", None) or DEFAULT_TIMEOUT_S)
        self.queue: "queue.SimpleQueue" = queue.SimpleQueue()
        self.handled = 0  # events done: the end's measure of progress
        self.last_done = time.monotonic()  # when the last event was done
        self.current: Optional[str] = None  # the hook running now, and since when
        self.since = 0.0
        self.failure: Optional[str] = None
        self.thread = threading.Thread(target=self._serve, name=f"fastpipe-{hook.key}", daemon=True)
        self.thread.start()

    def put(self, method: str, run: RunInfo, *args) -> None:
        if self.failure is None and callable(getattr(self.obj, method, None)):
            self.queue.put((method, run, args))

    def _serve(self) -> None:
        while True:
            item = self.queue.get()
            if item is _STOP:
                return
            method, run, args = item
            if self.failure is None:
                self.current, self.since = method, time.monotonic()
                try:
                    getattr(self.obj, method)(run, *args)
                except BaseException as exc:  # noqa: BLE001 - any failure of a tracker: warn once, go on
                    self._failed(run, f"{method} at step {run.step}", exc)
                self.current = None
            self.handled += 1
            self.last_done = time.monotonic()

    def stalled(self, now: float, ending: float) -> Optional[float]:
        """The seconds it has made no progress for, when that is past its limit (else None)."""
        if self.current == "on_start":
            return now - self.since if now - self.since > START_LIMIT_S else None
        idle = now - max(self.last_done, ending)
        return idle if idle > self.timeout_s else None

    def _failed(self, run: RunInfo, where: str, exc: BaseException) -> None:
        self.failure = (f"{self.hook.key} failed ({where}: {_one_line(exc)}); the run goes on without it")
        _say(f"fastpipe: warning: {self.failure}")
        self.leave(run, self.failure)

    def leave(self, run: RunInfo, why: str) -> None:
        """Its tracker run is left as the tracker has it: the launching process must not wait on it again."""
        key = getattr(self.obj, "state_key", None)
        if key:
            try:
                trackers_file.remember(run.dir, key, failed=why)
            except OSError:
                pass


class RunHooks:
    """The run's loggers and callbacks (config/logger.py's Hooks), built, started and called off the
    training thread: ``window``/``evaluation``/``checkpoint`` queue an event, ``end`` waits as above."""

    def __init__(self, hooks: Iterable[Hook], run: RunInfo) -> None:
        self.run, self.workers, self.notes = run, [], []
        for hook in hooks:
            try:
                obj = hook.build()
            except Exception as exc:  # noqa: BLE001 - checked before training; still never fatal here
                self._note(f"{hook.key} could not be built ({_one_line(exc)}); the run goes on without it")
                continue
            self.workers.append(_Worker(hook, obj))
        for worker in self.workers:
            worker.put("on_start", run)

    def _note(self, text: str) -> None:
        self.notes.append(text)
        _say(f"fastpipe: warning: {text}")

    def _send(self, method: str, step: int, *args) -> None:
        run = dataclasses.replace(self.run, step=int(step))
        for worker in self.workers:
            worker.put(method, run, *args)

    def window(self, step: int, scalars: Dict[str, float]) -> None:
        self._send("on_window", step, dict(scalars))

    def evaluation(self, step: int, metrics: Dict[str, float]) -> None:
        self._send("on_eval", step, dict(metrics))

    def checkpoint(self, step: int, path) -> None:
        self._send("on_checkpoint", step, path)

    def curve(self, tag: str, points) -> None:
        """A curve measured before training on its own step axis (optimizer.lr=auto's ``lr_find/loss``):
        ``points`` are ``(step, value)``."""
        self._send("on_curve", 0, tag, [(int(step), float(value)) for step, value in points])

    def end(self, step: int, record: dict) -> List[str]:
        """``on_end`` to each, then wait (see the module's docstring); returns the warnings to record."""
        self._send("on_end", step, record)
        for worker in self.workers:
            worker.queue.put(_STOP)
        ending, said = time.monotonic(), False
        waiting = list(self.workers)
        while waiting:
            time.sleep(0.02)
            now = time.monotonic()
            for worker in list(waiting):
                if not worker.thread.is_alive():
                    waiting.remove(worker)
                    continue
                idle = worker.stalled(now, ending)
                if idle is not None:
                    waiting.remove(worker)
                    self._note(f"{worker.hook.key} made no progress for {idle:.0f} s at the run's end; the run ends "
                               "without its last records")
                    worker.leave(self.run, self.notes[-1])
            if waiting and not said and now - ending > SAY_WAITING_S:
                said = True
                print(f"fastpipe: waiting for {', '.join(w.hook.key for w in waiting)} to take the run's last records",
                      file=sys.stderr, flush=True)
        return self.notes + [w.failure for w in self.workers if w.failure]
