"""``python signal_at.py spawn SIGNAL [fastpipe args]``: ``python -m fastpipe`` that sends itself SIGNAL
(TERM or USR1) at a phase of its start-up, so a test signals a phase by where the run is, not by
timing. ``spawn``: the moment its training process has started, which is still importing (its own
handlers are not set yet), before this process forwards signals to it."""
from __future__ import annotations

import os
import signal
import sys


def main() -> None:
    phase, sig = sys.argv[1], getattr(signal, f"SIG{sys.argv[2]}")
    if phase != "spawn":
        raise SystemExit(f"unknown phase {phase!r}")
    sys.argv = ["fastpipe", *sys.argv[3:]]
    from multiprocessing.process import BaseProcess  # spawned, or forked by the fork server (launch/prestart.py)

    import fastpipe.__main__ as app

    start = BaseProcess.start

    def start_then_signal(self):
        start(self)
        os.kill(os.getpid(), sig)

    BaseProcess.start = start_then_signal
    app.main()


if __name__ == "__main__":
    main()
