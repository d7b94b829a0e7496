"""The fork pools that generate and pack datasets while a run starts (fastpipe.processes.fork_pool):
their workers end on the pool's terminate() whatever signals the parent held or handled, also when the
SIGTERM lands before a worker has reset the handlers it inherited, and a stop signal that also killed
the workers (Slurm signals the whole process group) still stops the run instead of leaving it waiting.
Any process forked while starting up ends on a SIGTERM however early it comes, and a pool's terminate()
waits a bounded time whatever its workers do."""
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
    time.sleep(0.5)  # the window between a worker's fork and its handlers' reset, made wide (terminate() lands in ms)
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


def test_a_sigterm_right_after_a_fork_while_starting_up_ends_the_child():
    # a SIGTERM landing before the child's signal set-up was dropped by Python: a pool's worker so
    # lost terminate()'s SIGTERM, waited on the queue lock the pool holds, and the test hung (CI)
    with signals.stop_on_signals(), signals.deferred():
        for _ in range(5):
            pid = os.fork()
            if pid == 0:
                time.sleep(3.0)  # a lost signal: the child outlives it and exits 0
                os._exit(0)
            os.kill(pid, signal.SIGTERM)  # before the child has run (almost always)
            deadline, (ended, status) = time.monotonic() + 2.5, os.waitpid(pid, os.WNOHANG)
            while not ended and time.monotonic() < deadline:
                time.sleep(0.01)
                ended, status = os.waitpid(pid, os.WNOHANG)
            if not ended:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            assert ended and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
        signals._received = signals._before_training = None  # these SIGTERMs were the children's


def _ignore_sigterm():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def test_terminate_kills_workers_that_outlive_its_sigterm(monkeypatch):
    monkeypatch.setattr(processes, "POOL_END_S", 0.5)
    pool = processes.fork_pool(2, _ignore_sigterm)
    workers = list(pool._pool)
    pool.imap_unordered(_nap, [30.0] * 2)
    time.sleep(0.3)  # the workers are in their tasks
    started = time.monotonic()
    _terminate_ends_the_workers(pool)
    assert time.monotonic() - started < 5
    assert [worker.exitcode for worker in workers] == [-signal.SIGKILL] * 2


def test_terminate_returns_when_a_dead_worker_left_the_task_queue_locked(monkeypatch):
    monkeypatch.setattr(processes, "POOL_END_S", 0.5)
    pool = processes.fork_pool(2)
    assert sorted(pool.imap_unordered(abs, range(-8, 0))) == list(range(1, 9))
    time.sleep(0.3)  # idle: one worker waits for the next task holding the task queue's lock
    for worker in list(pool._pool):
        worker.kill()  # the process group's stop signal: the lock stays held for good
        worker.join(5)
    pool._inqueue._rlock.acquire(False)  # no worker had it yet: held here instead, never released either
    try:
        _terminate_ends_the_workers(pool)  # multiprocessing's own terminate() waits on that lock for ever
    finally:
        pool._inqueue._rlock.release()  # the terminate left in the background ends now
