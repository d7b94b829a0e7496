"""One sweep job in a fresh process, started by the ``gpus`` launcher.

The job file is a plain pickle of what this process needs before anything heavy is imported (the
sweep process's ``sys.path``, as multiprocessing's spawn passes it, its CPU cores, the sweep
process's id, where to write the outcome) and a payload pickled with cloudpickle, as Hydra's joblib
and submitit launchers send theirs: the job's config, composed by the launcher as
Hydra's BasicLauncher composes it; the task function (by reference when it can be imported, by value
otherwise: a callable object, a function defined inside another, a script's function); and Hydra's
singleton state (the ConfigStore, registered OmegaConf resolvers, the job runtime).

This process pins itself to its cores, installs fastpipe's stop-signal handling, restores the
singletons, then runs the job through Hydra's own ``run_job`` (the job's callbacks, its folder,
``hydra.job.chdir``, ``hydra.mode=MULTIRUN``: everything as under the basic launcher, so
``sweep.resume`` and a failed job's record behave the same) and writes run_job's JobReturn back.

Exit codes: 0 (the job ran, or could not be set up: the outcome file says which), 75 (stopped by
SIGTERM/SIGUSR1/SIGUSR2), 130 (Ctrl-C), 2 (the job folder is another live run's), anything else: the process died.
"""
from __future__ import annotations

import importlib
import inspect
import os
import pickle
import signal
import sys
import traceback


def load_task(task):
    """The task function: ``("module", name, qualname)`` (a ``python -m`` app's function, imported
    here and unwrapped from ``@hydra.main``), or the function itself, already unpickled."""
    if not isinstance(task, tuple):
        return task
    _, where, qualname = task
    obj = importlib.import_module(where)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return inspect.unwrap(obj)


def _dumps(outcome) -> bytes:
    """``outcome`` pickled so that the sweep process can load it; an unpicklable return value or
    exception travels as its text instead."""
    import cloudpickle

    try:
        data = cloudpickle.dumps(outcome)
        pickle.loads(data)  # an exception whose __init__ takes other arguments pickles but does not load
        return data
    except Exception:
        pass
    value = outcome.get("error") if isinstance(outcome, dict) else outcome._return_value
    text = value if isinstance(value, str) else f"{type(value).__name__}: {value}"
    failed = isinstance(value, BaseException)
    if isinstance(outcome, dict):
        outcome = {"error": RuntimeError(text)}
    else:
        outcome._return_value = RuntimeError(text) if failed else text
    return cloudpickle.dumps(outcome)


def _write_result(path: str, outcome) -> None:
    from fastpipe.files import atomic_write

    atomic_write(path, _dumps(outcome), fsync=False)  # the sweep process reads it once this process has ended


def main(job_file: str) -> int:
    with open(job_file, "rb") as fh:
        job = pickle.load(fh)
    sys.path[:] = job["sys_path"]  # the sweep process's: what it imports, this process imports too
    if job.get("cpus") and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, job["cpus"])  # before torch starts its threads: they follow the affinity
    from fastpipe.processes import die_with_parent, take_ctrl_c_once
    from fastpipe.signals import exit_on_stop_signals

    exit_on_stop_signals()  # a stop signal before the job starts: exit 75; the job then handles its own
    die_with_parent(job["parent"], signal.SIGTERM)  # the sweep process died: this job checkpoints and stops
    take_ctrl_c_once()  # the terminal's Ctrl-C and the one the sweep passes on are one: its record is written whole
    from hydra._internal.callbacks import Callbacks
    from hydra.core.singleton import Singleton
    from hydra.core.utils import JobRuntime, run_job, setup_globals
    from hydra.types import HydraContext

    try:
        payload = pickle.loads(job["payload"])  # may import the task's modules: after the affinity is set
        setup_globals()
        Singleton.set_state(payload["singletons"])
        config = payload["config"]
        JobRuntime.instance().set("name", str(config.hydra.job.name))
        task = load_task(payload["task"])
    except Exception as exc:  # the job cannot start here (an unimportable module...): the sweep raises it
        traceback.print_exc()
        _write_result(job["result"], {"error": exc})
        return 0
    try:
        ret = run_job(hydra_context=HydraContext(config_loader=None, callbacks=Callbacks(config)),
                      task_function=task, config=config, job_dir_key="hydra.sweep.dir",
                      job_subdir_key="hydra.sweep.subdir")
    except KeyboardInterrupt:
        return 130
    except SystemExit as exc:  # the job ended the sweep (stop signal 75, Ctrl-C 130, a folder in use 2)
        return exc.code if isinstance(exc.code, int) else 1
    value = ret._return_value
    if ret.status.name == "FAILED" and isinstance(value, BaseException):
        traceback.print_exception(type(value), value, value.__traceback__)
    _write_result(job["result"], ret)
    return 0


def entry(job_file: str) -> int:
    """The job process's entry point: ``main``, then the process ends within EXIT_WITHIN_S with its exit
    code: its outcome is written, and threads or pools left behind cannot hold its slot."""
    code = main(job_file)
    from fastpipe.processes import EXIT_WITHIN_S, exit_within

    exit_within(EXIT_WITHIN_S, code)
    return code


if __name__ == "__main__":
    sys.exit(entry(sys.argv[1]))
