"""Processes fastpipe starts (a sweep job's training process, a fork pool for start-up work) and how a
command's process ends: the start with stop signals held, so that none is lost or kills the child
unrecorded (the child acts on them once it can: signals.stop_on_signals), the child's end with its
parent, words for the child's exit code, one Ctrl-C taken once, and a bounded exit. Imports no torch."""
from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.pool
import os
import signal
import sys
import threading
import time
from typing import Callable, Iterator, Optional

from fastpipe.errors import EXIT_CODE
from fastpipe.signals import STOP_SIGNALS, handlers


@contextlib.contextmanager
def started_with_signals_held(start: Callable[[], int]) -> Iterator[int]:
    """Start the training process (``start()`` returns its pid) and pass the stop signals on to it,
    with no moment where a stop signal is lost or kills it unrecorded: the trainer starts with them
    blocked, so one sent to it while it imports stays pending until ``stop_on_signals`` records it
    (preempted, exit 75); one that reaches this process while it starts is forwarded once it has."""
    state = {"pid": None, "pending": []}

    def forward(signum, _frame):
        if state["pid"] is None:
            state["pending"].append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(state["pid"], signum)

    with handlers(forward):
        state["pid"] = started_blocked(start)
        for signum in list(state["pending"]):
            forward(signum, None)
        yield state["pid"]


def started_blocked(start: Callable[[], int]):
    """``start()`` (which starts a process) with the stop signals blocked, so that the process inherits
    the block: one sent to it while it imports stays pending until ``stop_on_signals`` records it."""
    if threading.current_thread() is not threading.main_thread():
        return start()
    from multiprocessing import resource_tracker

    # multiprocessing starts its resource tracker with the first process it spawns, and
    # unblocks SIGTERM after doing so: started first, it leaves the block below alone
    resource_tracker.ensure_running()
    with stop_signals_blocked():  # the trainer inherits the block
        return start()


@contextlib.contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """The stop signals blocked in this thread inside the block (a process forked or spawned here
    inherits the mask), the thread's mask as it was after."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def fork_pool(workers: int, initializer: Optional[Callable] = None, initargs: tuple = ()):
    """A fork ``multiprocessing.Pool`` for start-up work (generating, packing) whose workers end at its
    ``terminate()`` whatever the parent does with stop signals (or are killed: ``_BoundedPool``), and die
    with the parent. A forked
    worker keeps its parent's handlers until it resets them: a SIGTERM from ``terminate()`` landing
    before that was handled, not fatal, and the pool's join waited for ever. So the workers are forked
    with the stop signals blocked and unblock them only once they are back at their defaults. The block
    is the calling thread's (any thread): a fork copies the mask of the thread that forks, and the
    pool's own threads, started here, copy it too (its later replacement workers fork from them)."""
    with stop_signals_blocked():
        return _BoundedPool(workers, _pool_worker, (os.getpid(), initializer, initargs),
                            context=multiprocessing.get_context("fork"))


POOL_END_S = 10.0  # a fork pool's terminate() waits this long for its workers, kills them, and waits as long again


class _BoundedPool(multiprocessing.pool.Pool):
    """A pool whose terminate() (also at the end of a ``with``) and join() never wait without a bound:
    workers still alive ``POOL_END_S`` after terminate() began are killed; past as long again the pool
    is left to end in the background. A worker killed while it held a queue's lock (a stop signal to the
    whole process group) leaves the lock held for good, and multiprocessing's terminate() waits on it."""

    _left = False  # terminate() gave up: join() returns at once

    def terminate(self) -> None:
        ending = threading.Thread(target=super().terminate, name="fastpipe-pool-terminate", daemon=True)
        ending.start()
        ending.join(POOL_END_S)
        if ending.is_alive():  # a worker that outlived SIGTERM
            for worker in list(self._pool):
                worker.kill()
            ending.join(POOL_END_S)
        self._left = ending.is_alive()

    def join(self) -> None:
        if not self._left:
            super().join()


def _pool_worker(parent: int, initializer: Optional[Callable], initargs: tuple) -> None:
    from fastpipe.signals import pool_worker_signals

    pool_worker_signals()
    die_with_parent(parent)  # an orphan must not go on writing files another process now owns
    if initializer is not None:
        initializer(*initargs)


def exit_reason(code: int) -> str:
    """Words for a worker's exit code (negative = killed by that signal)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (the out-of-memory killer sends SIGKILL)" if name == "SIGKILL" else ""
        return f"training process killed by {name}{hint}"
    if code == 130:
        return "training process interrupted (Ctrl-C: exit code 130)"
    if code == EXIT_CODE:  # a failure it recognised, whose record it could not write (a full disk): it said it
        return f"training process failed (exit code {code}) without writing its record; its own error line is above"
    return f"training process exited with code {code}"


def die_with_parent(parent: int, how: int = signal.SIGKILL) -> None:
    """This (worker) process gets signal ``how`` when ``parent``, the process that started it, dies: on
    Linux through prctl(PR_SET_PDEATHSIG), so an orphan never goes on writing a run folder whose owner
    is gone. A training process asks for SIGTERM, its stop signal: it checkpoints once training and
    exits 75, as when preempted; a pool's worker for SIGKILL. A parent already gone by now means exit
    at once. (This module imports no torch, so that a sweep's job process can call it before it
    imports torch.)"""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, how)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


EXIT_WITHIN_S = 3.0  # after its record and last line, a process ends within this, whatever threads or pools remain


def exit_within(seconds: float, code: int) -> None:
    """End this process with ``code`` at most ``seconds`` from now: as it exits, Python joins its
    remaining threads and runs its exit handlers (a tracker's uploader, a pool's workers), any of which
    may wait without a bound; a daemon thread ends the process once the time is up."""
    def end() -> None:
        time.sleep(seconds)
        os._exit(code)

    threading.Thread(target=end, name="fastpipe-exit", daemon=True).start()


ONE_CTRL_C_S = 2.0  # SIGINTs this close together are one Ctrl-C (to the process group, and passed on)


def take_ctrl_c_once() -> None:
    """In a sweep job's process (its training process, a gpus launcher's job process): SIGINT raises
    KeyboardInterrupt as by default, but a second one within ``ONE_CTRL_C_S`` is the same Ctrl-C (the
    terminal signals the process group, and the sweep's process passes the signal on) and is ignored, so it
    cannot break off the recording of the first; a later Ctrl-C interrupts again."""
    last = [None]

    def interrupt(_signum, _frame):
        now = time.monotonic()
        if last[0] is not None and now - last[0] < ONE_CTRL_C_S:
            return
        last[0] = now
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, interrupt)
