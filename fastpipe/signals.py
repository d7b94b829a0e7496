"""Preemption signals: SIGTERM / SIGUSR1 make training checkpoint at the next step boundary and exit.

Slurm sends SIGTERM before it preempts or ends a job (or the signal named by ``--signal=USR1@60``
ahead of time). The training process notes the signal instead of dying; the loop checks the note
at each step boundary (under DDP at measurement-window edges, where all ranks agree), writes a
checkpoint and exits with ``EXIT_PREEMPTED``. The Hydra process that started the training process
forwards the signals to it, so signalling either one works.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Iterator, Optional

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
_received: Optional[int] = None


def received() -> Optional[str]:
    """The name of the stop signal received since ``stop_on_signals`` began, or None."""
    return None if _received is None else signal.Signals(_received).name


def _note(signum, _frame) -> None:
    global _received
    _received = signum  # only a note: the loop acts on it at a step boundary


@contextlib.contextmanager
def _handlers(handler) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # Python allows handlers there only
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """In the training process: SIGTERM/SIGUSR1 ask for a checkpoint and a clean stop."""
    global _received
    _received = None
    with _handlers(_note):
        yield


@contextlib.contextmanager
def forwarded_to(pid: int) -> Iterator[None]:
    """In the launching process: pass SIGTERM/SIGUSR1 on to the training process ``pid``."""
    def forward(signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    with _handlers(forward):
        yield
