"""The fork pools that generate and pack datasets while a run starts: their workers end on the
pool's terminate() whatever signals the parent held, and a stop signal that also killed the workers
(Slurm signals the whole process group) still stops the run instead of leaving it waiting."""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import pytest

from fastpipe import signals
from fastpipe.errors import Preempted


def _nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_workers_end_on_terminate_even_when_the_parent_holds_the_stop_signals():
    held = signal.pthread_sigmask(signal.SIG_BLOCK, signals.STOP_SIGNALS)  # as a trainer starting up does
    pool = multiprocessing.get_context("fork").Pool(2, signals.pool_worker_signals)
    try:
        assert sorted(pool.imap_unordered(abs, range(-8, 0))) == list(range(1, 9))
        pool.terminate()
        joiner = threading.Thread(target=pool.join, daemon=True)
        joiner.start()
        joiner.join(20)
        assert not joiner.is_alive(), "the pool's workers outlived terminate()"
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        for worker in getattr(pool, "_pool", []):
            worker.kill()


def test_a_stop_signal_that_killed_the_workers_is_acted_on_while_waiting_for_their_results():
    pool = multiprocessing.get_context("fork").Pool(2, signals.pool_worker_signals)
    try:
        with signals.stop_on_signals(), pytest.raises(Preempted, match="^stopped by SIGTERM while starting up"):
            with signals.deferred():
                results = signals.pool_results(pool.imap(_nap, [5.0] * 4), poll_s=0.2)
                time.sleep(0.5)  # the workers are in their tasks
                for worker in pool._pool:
                    os.kill(worker.pid, signal.SIGTERM)  # the process group's signal reaches them...
                os.kill(os.getpid(), signal.SIGTERM)  # ...and this process, which holds it back
                started = time.monotonic()
                for _ in results:
                    pass
        assert time.monotonic() - started < 5  # not the lost tasks' wait
    finally:
        pool.terminate()
        pool.join()
