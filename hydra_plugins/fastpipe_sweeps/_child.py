"""One sweep job in a fresh process, started by the ``gpus`` launcher.

The launcher composes the job's config as Hydra's BasicLauncher does and pickles it, with the task
function's address and the job's CPU cores, into a job file; this process pins itself to the cores,
installs fastpipe's stop-signal handling, then runs the job through Hydra's own ``run_job`` (the job's
callbacks, its folder, ``hydra.mode=MULTIRUN``: everything as in the basic launcher, so
``sweep.resume`` and a failed job's record behave the same) and writes the job's return back.

Exit codes: 0 (the job ran; its outcome is in the result file), 75 (stopped by SIGTERM/SIGUSR1),
130 (Ctrl-C), 2 (the job folder is another live run's), anything else: the process died.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import pickle
import sys
import traceback


def load_task(address):
    """The task function from ``(kind, module name or file, qualified name)``, unwrapped from
    ``@hydra.main``."""
    kind, where, qualname = address
    if kind == "module":
        module = importlib.import_module(where)
    else:
        spec = importlib.util.spec_from_file_location("_fastpipe_sweep_task", where)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return inspect.unwrap(obj)


def _write_result(path: str, status: str, value) -> None:
    try:
        data = pickle.dumps({"status": status, "value": value})
    except Exception:  # an unpicklable return or exception: its text travels instead
        text = value if isinstance(value, str) else f"{type(value).__name__}: {value}"
        data = pickle.dumps({"status": status, "value": RuntimeError(text) if status == "FAILED" else text})
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def main(job_file: str) -> int:
    with open(job_file, "rb") as fh:
        job = pickle.load(fh)
    if job.get("cpus") and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, job["cpus"])  # before torch starts its threads: they follow the affinity
    from fastpipe.signals import exit_on_stop_signals

    exit_on_stop_signals()  # SIGTERM/SIGUSR1 before the job starts: exit 75; the job then handles its own
    from fastpipe.runtime import die_with_parent

    die_with_parent(job["parent"])  # the sweep process died: so does this job
    from hydra.core.utils import JobRuntime, run_job, setup_globals
    from hydra.types import HydraContext
    from hydra._internal.callbacks import Callbacks

    setup_globals()
    config = job["config"]
    JobRuntime.instance().set("name", str(config.hydra.job.name))
    task = load_task(job["task"])
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
    _write_result(job["result"], ret.status.name, value)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
