"""The fork pools that generate and pack datasets while a run starts (fastpipe.processes.fork_pool):
their workers end on the pool's terminate() whatever signals the parent held or handled, also when the
SIGTERM lands before a worker has reset the handlers it inherited, and a stop signal that also killed
the workers (Slurm signals the whole process group) still stops the run instead of leaving it waiting."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from fastpipe import processes, signals
from fastpipe.errors import Preempted


def _nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_workers_end_on_terminate_even_when_the_parent_holds_the_stop_signals():
    held = signal.pthread_sigmask(signal.SIG_BLOCK, signals.STOP_SIGNALS)  # as a trainer starting up does
    pool = processes.fork_pool(2)
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


def _terminate_ends_the_workers(pool) -> None:
    workers = list(pool._pool)
    ended = threading.Event()

    def terminate():
        pool.terminate()
        pool.join()
        ended.set()

    threading.Thread(target=terminate, daemon=True).start()
    try:
        assert ended.wait(20), "terminate() left a worker alive and the pool's join waiting"
    finally:
        for worker in workers:  # never a hung worker left behind (kill() does nothing once one is reaped)
            worker.kill()


def _slow_reset(reset=signals.pool_worker_signals):
    time.sleep(1.0)  # the window between a worker's fork and its handlers' reset, made wide
    reset()


def test_a_terminate_landing_before_the_workers_reset_their_handlers_still_ends_them(monkeypatch):
    # a parent that handles SIGTERM (a job's stop handler) passes the handler on to each forked worker;
    # a SIGTERM handled there instead of killing it left the pool's join waiting for ever (a CI hang)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    monkeypatch.setattr(signals, "pool_worker_signals", _slow_reset)
    try:
        _terminate_ends_the_workers(processes.fork_pool(2))
        made = []  # and a pool started from another thread (the block is the forking thread's)
        thread = threading.Thread(target=lambda: made.append(processes.fork_pool(2)))
        thread.start()
        thread.join(20)
        _terminate_ends_the_workers(made[0])
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_stop_signal_that_killed_the_workers_is_acted_on_while_waiting_for_their_results():
    pool = processes.fork_pool(2)
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
