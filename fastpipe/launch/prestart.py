"""Where a single run's training process comes from: a fork server started as the job begins.

A spawned training process imports torch, fastpipe's trainer and torch._dynamo (which every torch
optimizer imports) only once the Hydra process has composed and checked the config and launched
it: a second second-long import after the Hydra process's own, on the run's set-up. For a single
run (launcher=single, a fresh process) the Hydra process instead starts multiprocessing's fork
server as soon as the job begins; the server imports those modules on another core while the
Hydra process checks the config, and the training process is forked from it with them imported.
The server is a fresh interpreter that never trains, so each training process forked from it
starts as clean as a spawned one (no CUDA, no compiled code, no loader state).

Like a spawned trainer (processes.started_with_signals_held), the server starts with the stop
signals blocked, and SIGINT too (a Ctrl-C while it imports would print its traceback): the trainer
inherits the block and unblocks them once it can act on them. The trainer's parent is the server,
whose trainers keep it alive, so the trainer dies with the Hydra process by watching its end of the
pipe that launched it. Sweeps, the other launchers and platforms without a fork server spawn.
"""
from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import threading

from fastpipe.config.registry import choice, names
from fastpipe.processes import die_with_parent
from fastpipe.runtime import started_by_torchrun
from fastpipe.signals import STOP_SIGNALS

TRAINER_MODULES = ["fastpipe.train.job", "torch._dynamo"]  # what the fork server imports ahead of the trainer
_method = {"name": "spawn"}


def prestart_trainer(launcher_cfg) -> None:
    """For a single run whose launcher starts one fresh training process (``launcher_cfg``: the composed
    ``launcher`` node), start the fork server now; elsewhere nothing (the trainer is spawned)."""
    name = launcher_cfg.get("name")
    if (name not in names("launcher") or choice("launcher", name).process_group  # an unknown one: refused later
            or not launcher_cfg.get("fresh_process", True)
            or started_by_torchrun() or "forkserver" not in multiprocessing.get_all_start_methods()
            or threading.current_thread() is not threading.main_thread()):
        return
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()  # first: it unblocks SIGTERM as it starts (processes.started_with_signals_held)
    forkserver.set_forkserver_preload(TRAINER_MODULES)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, (*STOP_SIGNALS, signal.SIGINT))
    try:
        forkserver.ensure_running()  # returns at once; the server imports the modules on its own
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    _method["name"] = "forkserver"


def start_method() -> str:
    """The start method of this process's next training process: ``forkserver`` once prestarted, else spawn."""
    return _method["name"]


def die_with_launcher(parent: int) -> None:
    """In the training process: die with the Hydra process ``parent`` that launched it. Spawned, it is the
    parent (the kernel's parent-death signal); forked by the fork server, a thread waits for the launcher's
    end of the launching pipe to close, however the launcher ends, and kills this process then."""
    if os.getppid() == parent or multiprocessing.parent_process() is None:
        die_with_parent(parent)
        return
    sentinel = multiprocessing.parent_process().sentinel

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="fastpipe-launcher-watch", daemon=True).start()
