"""fastpipe.processes.fork_pool: a start-up pool's terminate() ends its workers whatever the parent does
with stop signals, also when the SIGTERM lands before a worker has reset the handlers it inherited
(CI once hung for ever in a pack build refused just after its pool started)."""
from __future__ import annotations

import os
import signal
import threading
import time

from fastpipe import processes, signals


def slow_reset():
    time.sleep(1.0)  # the window between the fork and the reset, made wide
    RESET()


RESET = signals.pool_worker_signals


def test_a_terminate_landing_before_the_workers_reset_their_handlers_still_ends_them(monkeypatch):
    noted = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: noted.append(signum))  # a parent that notes stops
    monkeypatch.setattr(signals, "pool_worker_signals", slow_reset)
    try:
        pool = processes.fork_pool(2)
        workers = [p.pid for p in pool._pool]
        ended = threading.Event()

        def terminate():
            pool.terminate()  # SIGTERM to each worker, still inside its slow reset
            pool.join()
            ended.set()

        threading.Thread(target=terminate, daemon=True).start()
        try:
            assert ended.wait(20), "terminate() left a worker alive and its join waiting"
        finally:
            for pid in workers:  # never leave a hung worker behind, whatever the outcome
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert noted == []  # the workers' signals never reached the parent's handler
