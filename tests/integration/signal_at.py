"""``python signal_at.py PHASE SIGNAL [fastpipe args]``: ``python -m fastpipe`` that sends itself SIGNAL
(TERM, USR1 or INT) when it reaches PHASE of its start-up, so a test signals each phase by where the
run is, not by timing:

    compose    Hydra composing the config, before any job
    job_start  Hydra's on_job_start callbacks (fastpipe's RunGuard: the run folder's lock)
    settings   fastpipe converting the config (the job has begun)
    spawn      this process, the moment the training process has started (still importing: its own
               handlers are not set yet, nor this process's forwarding to it)
    trainer    the training process itself, the moment it has started (a scheduler signals every
               process of the job)
"""
from __future__ import annotations

import functools
import os
import signal
import sys


def signal_before(owner, name: str, sig: int, after: bool = False) -> None:
    """``owner.name`` sends ``sig`` to this process before it runs (``after``: once it returned)."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if not after:
            os.kill(os.getpid(), sig)
        result = original(*args, **kwargs)
        if after:
            os.kill(os.getpid(), sig)
        return result

    setattr(owner, name, wrapper)


def main() -> None:
    phase, sig = sys.argv[1], getattr(signal, f"SIG{sys.argv[2]}")
    sys.argv = ["fastpipe", *sys.argv[3:]]
    import fastpipe.__main__ as app

    if phase == "compose":
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        signal_before(ConfigLoaderImpl, "load_configuration", sig)
    elif phase == "job_start":
        from fastpipe.report.callbacks import RunGuard
        signal_before(RunGuard, "on_job_start", sig)
    elif phase == "settings":
        signal_before(app, "to_settings", sig)
    elif phase == "spawn":
        from multiprocessing.context import SpawnProcess
        signal_before(SpawnProcess, "start", sig, after=True)
    elif phase == "trainer":
        from multiprocessing.context import SpawnProcess
        start = SpawnProcess.start

        def start_and_signal(self):
            start(self)
            os.kill(self.pid, sig)

        SpawnProcess.start = start_and_signal
    else:
        raise SystemExit(f"unknown phase {phase}")
    app.main()


if __name__ == "__main__":
    main()
