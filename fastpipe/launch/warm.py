"""A training process started before its job is known, so that its imports are off the critical path.

A fresh training process spends seconds importing torch, torchvision and the stages before it reads
its settings. So ``prestart`` spawns the process as a job begins (its imports then run while the
Hydra process composes and checks the config and records the run's provenance) and, in a sweep of jobs
that train on a GPU, again as each job hands its process over (the next job's imports run while this
one trains). ``take`` gives the launcher the waiting process, which then runs the job exactly as a
process spawned for it would: same entry point, stop signals blocked from its start (processes.py),
killed with the Hydra process.

It is not used when the Hydra process's environment has changed since it started in a variable
torch or the loaders read as they import (``CUDA_*``, ``TORCH*``, ``OMP_*``...), unless the waiting
process's own imports left that variable with the same value: a sweep's process imports torch too
(to check its jobs' callables), and torch's imports set variables of their own
(``TORCHINDUCTOR_CACHE_DIR``, for one), which would otherwise refuse every process started ahead. (A
single run's Hydra process leaves those checks to the training process: launcher.py ``checks_in_trainer``.)
A refused process is replaced by a freshly spawned one, and the run's warnings say why. Other
changes (a tracker's settings) reach it with the job, as do ``sys.path`` entries added since (the
working folder, for a project's modules).
"""
from __future__ import annotations

import atexit
import importlib
import multiprocessing
import os
import sys
from typing import Callable, Dict, Optional, Sequence, Tuple

WARM_IMPORTS = ("fastpipe.train.job", "torchvision")  # what every image run imports before its first step
IMPORT_WAIT_S = 120.0  # how long a job waits for the process started ahead to finish importing
READ_AT_IMPORT = ("CUDA", "TORCH", "PYTORCH", "NCCL", "NVIDIA", "TRITON", "OMP_", "MKL", "KMP_", "LD_", "PYTHON",
                  "FASTPIPE")


class WarmProcess:
    """A spawned training process that has imported ``WARM_IMPORTS`` and waits for its job."""

    def __init__(self, process, conn, env: dict) -> None:
        self.process, self.conn, self.env = process, conn, env

    def unfit(self) -> Optional[str]:
        """None when it can run this job: alive, and in the environment the job runs in as far as the
        variables read at import go (each one changed here since it started has the value its own
        imports left it); else why not."""
        if not self.process.is_alive():
            return "it had ended"
        changed = sorted(k for k in set(os.environ) | set(self.env)
                         if read_at_import(k) and os.environ.get(k) != self.env.get(k))
        if not changed:
            return None
        # usual (torch's own import here sets TORCHINDUCTOR_CACHE_DIR): what its imports left, once done
        theirs = self._imported_env()
        if theirs is None:
            return (f"it had not finished importing after {IMPORT_WAIT_S:.0f} s" if self.process.is_alive()
                    else "it ended while importing")
        differ = [k for k in changed if os.environ.get(k) != theirs.get(k)]
        return (f"{', '.join(differ)} changed since it started, and torch reads such variables as it "
                "imports") if differ else None

    def _imported_env(self) -> Optional[Dict[str, str]]:
        """The variables read at import, as the process's own imports left them (sent once imported);
        None if it ends first or takes longer than IMPORT_WAIT_S."""
        try:
            return self.conn.recv() if self.conn.poll(IMPORT_WAIT_S) else None
        except (EOFError, OSError):
            return None

    def hand_over(self, target: Callable, *args) -> int:
        """Give it its job: it calls ``target(*args)`` (the entry point a spawned process would have
        run, passed by name); returns its pid."""
        self.conn.send((target, args, dict(os.environ), list(sys.path)))
        self.conn.close()
        return self.process.pid

    def dismiss(self) -> None:
        """No job for it: it exits as it reads the closed pipe; one still importing is killed (its stop
        signals are blocked), so that a command refused at once also ends at once."""
        self.conn.close()
        self.process.join(timeout=0.5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


_ready: Optional[WarmProcess] = None
keep_one_ready = False  # a sweep: start the next job's process as this one's is handed over


def prestart(imports: Sequence[str] = WARM_IMPORTS) -> None:
    """Start a waiting training process, unless one waits already."""
    global _ready
    from fastpipe.processes import started_blocked

    if _ready is not None:
        if _ready.process.is_alive():
            return
        _ready.dismiss()  # it died waiting (killed): reap it
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=_wait_for_a_job, args=(theirs, os.getpid(), tuple(imports)),
                              name="fastpipe-train")
    started_blocked(process.start)
    theirs.close()
    if _ready is None:
        atexit.register(dismiss)
    _ready = WarmProcess(process, ours, dict(os.environ))


def read_at_import(name: str) -> bool:
    """Whether torch, the loaders or the interpreter read the environment variable ``name`` as they
    start or import."""
    return name.upper().startswith(READ_AT_IMPORT)


NO_RUN = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--version", "--shell-completion", "-sc")
NO_FRESH_PROCESS = ("launcher=ddp", "launcher=fsdp", "launcher.fresh_process=false")
OTHER_PROCESSES = "hydra/launcher="  # a sweep launcher running each job in a process of its own


def prestart_if_training(argv: Sequence[str]) -> None:
    """Before Hydra composes: start one unless the command line prints something instead of training
    (``--help``, ``--cfg``...), names a launcher that starts no such process, or a sweep launcher
    that runs each job elsewhere (a config may still choose one: ``prestart_for`` then ends it)."""
    if not any(arg in NO_RUN or arg.lower() in NO_FRESH_PROCESS or arg.startswith(OTHER_PROCESSES) for arg in argv):
        prestart()


def prestart_for(launcher_cfg, sweep: bool, device: str = "auto") -> None:
    """As a job starts: one waits for it when its launcher runs one fresh training process
    (launcher=single, ``launcher.fresh_process``), none otherwise (nor for a launcher no choice
    registers); in a sweep whose jobs train on a GPU (``device``), keep one ready for each next job.
    Not on the CPU: there a job trains on every core, so the next job's imports beside it would stretch
    its measured training clock (benchmarks/results/sweep-warm), and the last one would run no job."""
    global keep_one_ready
    from fastpipe.config.registry import choice, names
    from fastpipe.machine import trains_on_a_gpu

    name = launcher_cfg.get("name")
    if (name not in names("launcher")  # an unknown one: to_settings refuses it in one line, after this
            or choice("launcher", name).process_group or not launcher_cfg.get("fresh_process", True)):
        dismiss()
        return
    keep_one_ready = sweep and trains_on_a_gpu(str(device))
    prestart()


def take() -> Tuple[Optional[WarmProcess], Optional[str]]:
    """(the waiting process, None) if it can run this job (``unfit``); else (None, why not, or None
    when none was waiting): a fresh one is spawned."""
    global _ready
    warm, _ready = _ready, None
    if warm is None:
        return None, None
    try:
        why = warm.unfit()
    except BaseException:  # Ctrl-C while it imports: it is no longer the waiting one, so end it here
        warm.dismiss()
        raise
    if why is None:
        return warm, None
    warm.dismiss()
    return None, why


def dismiss() -> None:
    """End the waiting process, if any (the Hydra process's exit)."""
    global _ready
    warm, _ready = _ready, None
    if warm is not None:
        warm.dismiss()


def _wait_for_a_job(conn, parent: int, imports: Sequence[str]) -> None:
    """The waiting process: import, wait for the job, then run it as a freshly spawned one would."""
    from fastpipe.measure import setup
    from fastpipe.processes import die_with_parent

    die_with_parent(parent)
    try:
        for name in imports:
            try:
                importlib.import_module(name)
            except Exception:  # the job's own import raises it again, where it is reported
                pass
        setup.imports_done()  # the job's set-up counts what comes after as its launch
        try:
            conn.send({k: v for k, v in os.environ.items() if read_at_import(k)})  # what the imports left (unfit)
        except OSError:  # the job was handed over and the pipe closed before this: it is read below all the same
            pass
        job = conn.recv()  # unpickling the entry point imports its module, sys.path as at the start
    except (EOFError, OSError):  # dismissed: no job came
        os._exit(0)
    except KeyboardInterrupt:  # Ctrl-C to the process group while waiting: the Hydra process says it
        os._exit(130)
    target, args, env, path = job
    os.environ.clear()
    os.environ.update(env)
    sys.path[:] = path + [p for p in sys.path if p not in path]
    target(*args)
