"""``python signal_at.py spawn SIGNAL [fastpipe args]``: ``python -m fastpipe`` that sends itself SIGNAL
(TERM or USR1) at a phase of its start-up, so a test signals a phase by where the run is, not by
timing. ``spawn``: the moment its fresh training process has started (``launcher.fresh_process=true``),
which is still importing or has not set its own handlers yet, before this process forwards signals
to it."""
from __future__ import annotations

import os
import signal
import sys


def main() -> None:
    phase, sig = sys.argv[1], getattr(signal, f"SIG{sys.argv[2]}")
    if phase != "spawn":
        raise SystemExit(f"unknown phase {phase!r}")
    sys.argv = ["fastpipe", *sys.argv[3:]]
    import fastpipe.__main__ as app
    from fastpipe.launch import dispatch

    held = dispatch.started_with_signals_held

    def held_then_signal(start):
        def start_then_signal():
            pid = start()
            os.kill(os.getpid(), sig)
            return pid

        return held(start_then_signal)

    dispatch.started_with_signals_held = held_then_signal
    app.main()


if __name__ == "__main__":
    main()
