"""Stop signals: SIGTERM / SIGUSR1 / SIGUSR2 stop a run at any moment with exit code 75 (EXIT_PREEMPTED).

Slurm sends SIGTERM before it preempts or ends a job (or the signal named by ``--signal=USR1@60``
ahead of time; submitit asks for SIGUSR2). What a stop signal does depends on where the run is:

- starting up (composing and checking the config; building the graph, packing a dataset): there is
  nothing to checkpoint yet, so it stops at once (``Preempted`` is raised where the signal lands;
  files being written are temporary files, cleaned up);
- training: the run notes the signal; the loop checks the note at each step boundary (under DDP at
  measurement-window edges, where all ranks agree), writes a checkpoint and stops;
- finishing (training done, results being written): the note is kept and the run completes.

A single run trains in the process the user started, so the signals reach its loop directly. A sweep
job's training process is started with them held and the sweep process forwards them to it
(processes.started_with_signals_held), so signalling either one works. Ctrl-C (SIGINT) stays an
interrupt: exit code 130, no checkpoint; a sweep process passes it on to its job's process too, which
takes the one its process group got and the one passed on as one Ctrl-C (processes.take_ctrl_c_once).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Iterator, Optional

from fastpipe.errors import Preempted

# SIGUSR2 too: submitit (hydra/launcher=fastpipe_slurm) asks Slurm for its time-limit warning as SIGUSR2.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
_received: Optional[int] = None
_phase = "starting"  # starting | training | finishing
_before_training: Optional[tuple] = None  # (signal, where) of a stop signal before training began
_owner: Optional[int] = None  # the process whose handlers these are (a forked child inherits them)
_deferring = 0  # inside ``deferred()``: a start-up stop waits for ``check()``
_active = False  # inside ``stop_on_signals()``: ``check()`` acts on the run's stop signal


def received() -> Optional[str]:
    """The name of the stop signal received since ``stop_on_signals`` began, or None."""
    return None if _received is None else signal.Signals(_received).name


def _stop_now(signum, what: str) -> Preempted:
    global _before_training
    _before_training = (signum, what)
    name = signal.Signals(signum).name
    return Preempted(f"stopped by {name} while {what}, before training began: nothing to checkpoint; run the "
                     "same command again", metrics={"status": "preempted"})


def stopped_before_training() -> Optional[Preempted]:
    """The ``Preempted`` of a stop signal that came before training began in this job, or None.

    The signal raises ``Preempted`` wherever the process is; code there may turn it into its own
    error (an image that "cannot be read", a compile fall-back, a settings error) or swallow it. The
    job still stopped because of the signal: its record says so, with exit code 75."""
    return None if _before_training is None else _stop_now(*_before_training)


def _in_forked_child(signum) -> bool:
    """A process forked from the one that set the handlers (a pool's worker, a DataLoader worker): while
    starting up it ends quietly (a pool's terminate() signals its workers; ``_forking`` gives such a
    child the default action, which no race loses), later the signal is left to the training process,
    which checkpoints."""
    if _owner is None or os.getpid() == _owner:
        return False
    if _phase == "starting":
        os._exit(128 + signum)
    return True


def _resets_in_child() -> bool:
    """A fork now would pass on this process's own start-up stop handlers (``_note``, ``_launching``)."""
    return _owner == os.getpid() and _phase == "starting" and any(
        signal.getsignal(sig) in (_note, _launching) for sig in STOP_SIGNALS)


_held_at_fork: dict = {}  # forking thread's id -> its signal mask before ``_forking`` blocked the stop signals


def _forking(stage: str) -> None:
    """os.register_at_fork's hooks: a child forked while starting up gets the stop signals at their
    defaults. Its inherited handler could not end it for sure: a SIGTERM landing between the fork and
    the child's own signal set-up is dropped by Python (it clears signals that came in before), and a
    pool's worker that lost terminate()'s SIGTERM so waited on the queue lock the pool then holds,
    and the pool's join with it (a CI hang). The forking thread holds the stop signals across the fork,
    so one sent in between stays pending and ends the child as soon as it is back at its default."""
    me = threading.get_ident()  # the forking thread's, also in the child
    if stage == "child":
        try:
            _disown_parents_children()
        except Exception:  # never in the way of the mask put back below (a pool's worker must get its signals)
            pass
    if stage == "before":
        if _resets_in_child():
            _held_at_fork[me] = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        return
    mask = _held_at_fork.pop(me, None)
    if mask is None:
        return
    if stage == "child":
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) in (_note, _launching):
                signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _disown_parents_children() -> None:
    """In a forked child: forget the parent's multiprocessing children (its DataLoader workers, a pool's
    workers) and its finalizers. A raw fork copies them; a child that then exits through Python's exit
    handlers would SIGTERM each daemonic child (multiprocessing.util._exit_function) and run the parent's
    finalizers (a pool's terminate), and torch's handler in a worker signalled by another than its parent
    dies of it: the parent's training then fails with "DataLoader worker is killed by signal: Terminated"
    (issue 53). A multiprocessing child clears the same itself (BaseProcess._bootstrap)."""
    process, util = sys.modules.get("multiprocessing.process"), sys.modules.get("multiprocessing.util")
    if process is not None:
        process._children.clear()
    if util is not None:  # the parent's finalizers (a pool's terminate, its queues'): as multiprocessing's child does
        util._finalizer_registry.clear()
    dataloader = sys.modules.get("torch.utils.data.dataloader")
    if dataloader is not None and hasattr(dataloader, "_persistent_workers_atexit"):
        dataloader._persistent_workers_atexit.clear()  # the parent's iterators: not this child's to shut down


def _note(signum, _frame) -> None:
    global _received
    if _in_forked_child(signum):
        return
    _received = signum
    if _phase == "starting":
        if _deferring:
            _stop_now(signum, "starting up")  # noted; ``check()`` raises it where it is safe
            return
        raise _stop_now(signum, "starting up")
    # training: the loop acts on the note at a step boundary; finishing: the run completes


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Around a fork pool while starting up (generating, packing): a stop signal does not raise inside
    the pool's own machinery (its fork hooks, its queues' locks), where the exception is lost or leaves
    a lock held and the pool hung; it raises at the next ``check()``, or as the block ends."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
    check()


def check() -> None:
    """Raise the ``Preempted`` of a stop signal that ``deferred()`` held back (between units of work)."""
    if _active and _phase == "starting" and _before_training is not None and _received is not None:
        raise stopped_before_training()


@contextlib.contextmanager
def handlers(handler) -> Iterator[None]:
    """Inside the block, ``handler`` handles the stop signals (in the main thread only, where Python allows
    handlers; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():  # Python allows handlers there only
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


AGENT_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
                      if hasattr(signal, name))


@contextlib.contextmanager
def handlers_kept(signals=AGENT_SIGNALS) -> Iterator[None]:
    """The handlers of ``signals`` put back as they were once the block ends (in the main thread, where
    Python allows handlers): torch elastic's agent leaves its own on them in the process that launched
    the ranks, where a later Ctrl-C would then raise its SignalException instead of KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.getsignal(sig) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in before.items():
            if handler is not None:  # None: set outside Python, which cannot be put back
                signal.signal(sig, handler)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """In the training process, for the whole run: see the module docstring. A stop signal that
    arrived while the process was still importing (``started_with_signals_held``) is acted on here."""
    global _received, _phase, _before_training, _owner, _active
    _received, _phase, _before_training, _owner, _active = None, "starting", None, os.getpid(), True
    try:
        with handlers(_note):
            if threading.current_thread() is threading.main_thread():
                signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # a pending one raises Preempted now
            yield
    finally:  # check() acts only inside: a later dataset build in this process is not stopped by this run's signal
        _active = False


@contextlib.contextmanager
def training() -> Iterator[None]:
    """The training loop: a stop signal is noted and acted on at the next step boundary. One that came
    while starting up and was swallowed where it landed stops the run here, before the first step."""
    global _phase
    stopped = stopped_before_training()
    if stopped is not None:
        raise stopped
    _phase = "training"
    try:
        yield
    finally:
        _phase = "finishing"


def outside_a_job(signum: int) -> str:
    """What a stop signal outside any job (composing the config, between a sweep's jobs) did, and what to do."""
    return (f"stopped by {signal.Signals(signum).name} outside a job (composing the config, or between a sweep's "
            "jobs): run the same command again; a sweep run again into the same hydra.sweep.dir with "
            "sweep.resume=true skips the jobs that finished")


def exit_on_stop_signals() -> None:
    """In the command's process, outside any job (composing, between a sweep's jobs): a stop signal
    ends the run or sweep at once with exit code 75."""
    from fastpipe.errors import EXIT_PREEMPTED

    def stop(signum, _frame):
        import sys

        print(f"fastpipe: error: {outside_a_job(signum)}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_PREEMPTED)

    for sig in STOP_SIGNALS:
        signal.signal(sig, stop)


def _launching(signum, _frame) -> None:
    if not _in_forked_child(signum):
        raise _stop_now(signum, "launching")


@contextlib.contextmanager
def stop_while_launching() -> Iterator[None]:
    """In the command's process, around a job: a stop signal before the run's own handling begins
    (``stop_on_signals``) stops the job (and the sweep) with exit code 75; a job's fresh training process,
    once started, gets the signals passed on (``started_with_signals_held``)."""
    global _before_training, _owner
    _before_training, _owner = None, os.getpid()
    with handlers(_launching):
        yield


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=lambda: _forking("before"), after_in_parent=lambda: _forking("parent"),
                        after_in_child=lambda: _forking("child"))


def pool_worker_signals() -> None:
    """In a fork pool's worker (generating, packing): the stop signals at their defaults and unblocked.
    A fork inherits its parent's handlers and signal mask; a worker that held the stop signals, or
    only noted them, would outlive the pool's terminate() (SIGTERM) and leave its join waiting for
    ever. The pool's owner acts on a stop signal itself (``deferred``/``check``)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def pool_results(results, poll_s: float = 1.0) -> Iterator:
    """The results of a fork pool's ``imap``/``imap_unordered``, with ``check()`` at least every ``poll_s``
    seconds: a stop signal sent to the whole process group (Slurm's) also kills the workers, whose
    tasks then never return, so waiting on the next result alone would wait for ever. ``results`` is
    the iterator of a call with chunksize 1 (a larger one gives a plain generator, without a timeout)."""
    import multiprocessing

    while True:
        try:
            yield results.next(timeout=poll_s)
        except multiprocessing.TimeoutError:
            check()
        except StopIteration:
            return
