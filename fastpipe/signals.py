"""Preemption signals: SIGTERM / SIGUSR1 stop a run at any moment with exit code 75 (EXIT_PREEMPTED).

Slurm sends SIGTERM before it preempts or ends a job (or the signal named by ``--signal=USR1@60``
ahead of time). What a stop signal does depends on where the run is:

- starting up (the Hydra process composing and launching; the trainer building its graph, packing
  a dataset): there is nothing to checkpoint yet, so it stops at once (``Preempted`` is raised where
  the signal lands; files being written are temporary files, cleaned up);
- training: the trainer notes the signal; the loop checks the note at each step boundary (under
  DDP at measurement-window edges, where all ranks agree), writes a checkpoint and stops;
- finishing (training done, results being written): the note is kept and the run completes.

The Hydra process that started the training process forwards the signals to it, so signalling
either one works. Ctrl-C (SIGINT) stays an interrupt: exit code 130, no checkpoint.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Iterator, Optional

from fastpipe.errors import Preempted

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
_received: Optional[int] = None
_phase = "starting"  # starting | training | finishing


def exit_reason(code: int) -> str:
    """Words for a worker's exit code (negative = killed by that signal)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (the out-of-memory killer sends SIGKILL)" if name == "SIGKILL" else ""
        return f"training process killed by {name}{hint}"
    return f"training process exited with code {code}"


def received() -> Optional[str]:
    """The name of the stop signal received since ``stop_on_signals`` began, or None."""
    return None if _received is None else signal.Signals(_received).name


def _stop_now(signum, what: str) -> Preempted:
    name = signal.Signals(signum).name
    return Preempted(f"stopped by {name} while {what}, before training began: nothing to checkpoint; run the "
                     "same command again", metrics={"status": "preempted"})


def _note(signum, _frame) -> None:
    global _received
    _received = signum
    if _phase == "starting":
        raise _stop_now(signum, "starting up")
    # training: the loop acts on the note at a step boundary; finishing: the run completes


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
    """In the training process, for the whole run: see the module docstring."""
    global _received, _phase
    _received, _phase = None, "starting"
    with _handlers(_note):
        yield


@contextlib.contextmanager
def training() -> Iterator[None]:
    """The training loop: a stop signal is noted and acted on at the next step boundary."""
    global _phase
    _phase = "training"
    try:
        yield
    finally:
        _phase = "finishing"


def exit_on_stop_signals() -> None:
    """In the Hydra process, outside any job (composing, between a sweep's jobs): a stop signal
    ends the run or sweep at once with exit code 75."""
    from fastpipe.errors import EXIT_PREEMPTED

    def stop(signum, _frame):
        import sys

        print(f"fastpipe: error: stopped by {signal.Signals(signum).name}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_PREEMPTED)

    for sig in STOP_SIGNALS:
        signal.signal(sig, stop)


def _launching(signum, _frame) -> None:
    raise _stop_now(signum, "launching")


@contextlib.contextmanager
def stop_while_launching() -> Iterator[None]:
    """In the Hydra process, around a job: a stop signal before the trainer runs stops the job (and
    the sweep) with exit code 75; while the trainer runs, ``forwarded_to`` passes signals on."""
    with _handlers(_launching):
        yield


@contextlib.contextmanager
def forwarded_to(pid: int) -> Iterator[None]:
    """In the launching process: pass SIGTERM/SIGUSR1 on to the training process ``pid``."""
    def forward(signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    with _handlers(forward):
        yield


def die_with_parent(parent: int) -> None:
    """This (worker) process is killed when ``parent``, the process that started it, dies: on Linux
    through prctl(PR_SET_PDEATHSIG), so an orphan never goes on writing a run folder whose owner
    is gone; a parent already gone by now means exit at once. (Here, not in runtime.py, so that a
    sweep's job process can call it before it imports torch.)"""
    import sys

    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)
