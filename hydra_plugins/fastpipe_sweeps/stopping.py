"""How a sweep on the ``gpus`` launcher stops: SIGTERM/SIGUSR1/SIGUSR2 to the sweep process go to every running
job (each stops and checkpoints as a serial job would) and no further job starts; a job that ends the way
a serial sweep ends (stopped by a signal, interrupted, unable to start) ends this sweep too, the running
jobs told to stop. The sweep then exits with the code a serial sweep would (75, 130, 2)."""

import contextlib
import os
import signal
import sys
import threading
from typing import Dict, Optional

from fastpipe.signals import STOP_SIGNALS


def signal_running(running: Dict[int, object], signum: int) -> None:
    """Send ``signum`` to every running job's process ({num: Job})."""
    for job in running.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(job.proc.pid, signum)


class SweepStop:
    """Whether, and why, the sweep stops: ``code`` (None while it goes on) and ``reason``."""

    def __init__(self) -> None:
        self.code: Optional[int] = None  # the exit code the sweep will end with (75, 130, 2)
        self.reason = ""

    @contextlib.contextmanager
    def forwarding(self, running: Dict[int, object]):
        """While jobs run ({num: Job}, updated by the caller), the stop signals (SIGTERM, SIGUSR1, SIGUSR2) go to
        every running job, and no further job starts."""
        def forward(signum, _frame):
            if self.code is None:
                self.code, self.reason = 75, f"stopped by {signal.Signals(signum).name}"
            signal_running(running, signum)

        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, forward) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    def after(self, job, running: Dict[int, object]) -> None:
        """``job`` ended: one that ended the way a serial sweep ends (stopped, interrupted, its folder in use)
        without a JobReturn ends this sweep too, and the others are told to stop."""
        code = job.proc.returncode
        if self.code is not None or code not in (2, 75, 130) or job.had_result:
            return
        if code == 75:
            self.code, self.reason = 75, f"job {job.num} was stopped by a signal"
            signal_running(running, signal.SIGTERM)
        elif code == 130:
            self.code, self.reason = 130, f"job {job.num} was interrupted (Ctrl-C)"
            signal_running(running, signal.SIGINT)
        else:
            self.code, self.reason = 2, f"job {job.num} could not start (see its message above)"
            signal_running(running, signal.SIGTERM)

    def end_sweep(self, left: int, during: Optional[str] = None) -> None:
        """Once no job runs: a stopped sweep says why, where (``during``: a race's or halving's round, as
        the basic launcher's sweep says it) and how to finish it (``left``: jobs that did not start), then
        exits with its code (130: as a KeyboardInterrupt); otherwise nothing."""
        if self.code is None:
            return
        where = f"{during}; " if during else ""
        print(f"fastpipe: error: {self.reason}: {where}the running jobs stopped (a job that had begun training "
              f"checkpointed first){f'; {left} job(s) did not start' if left else ''}; run the same command "
              "with sweep.resume=true to finish the sweep", file=sys.stderr, flush=True)
        if self.code == 130:
            raise KeyboardInterrupt
        sys.exit(self.code)
