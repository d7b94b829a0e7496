"""One job of the ``gpus`` launcher as the sweep process sees it: its files, how its task function
travels, its output, and the JobReturn it ends with (``_child.py`` is the other side, in the job's process)."""

import contextlib
import copy
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from hydra.core.utils import JobReturn, JobStatus
from hydra.types import TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

LAUNCHER_FILE = "launcher.json"
OUTPUT_FILE = "output.log"


def task_for_job(task_function: TaskFunction):
    """The task function as it travels to a job process (``_child.load_task`` takes it back):
    ``("module", name, qualname)`` for a top-level function of an app run as ``python -m NAME``
    (its ``__module__`` is ``__main__``, which a fresh process does not have: it imports NAME, as
    ``python -m fastpipe`` needs); otherwise the object itself, for cloudpickle (by reference when it
    can be imported by module and name, by value when not: a callable object, a function defined
    inside another, a script's function)."""
    module, qualname = getattr(task_function, "__module__", None), getattr(task_function, "__qualname__", "")
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if module == "__main__" and spec is not None and spec.name and "<locals>" not in qualname:
        return "module", spec.name, qualname
    return task_function


def death(code: int) -> str:
    """How a job process ended, from its exit code (negative: the signal that killed it)."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        how = f"killed by {signal.Signals(-code).name}"
    except ValueError:
        how = f"killed by signal {-code}"
    return how + (" (the out-of-memory killer sends SIGKILL)" if code == -signal.SIGKILL else "")


def write_json(path: Path, payload: dict) -> None:
    from fastpipe.record.results import write_json_atomic

    write_json_atomic(path, payload)


def pump_output(stream, prefix: str, log_path: Path, print_lock: threading.Lock) -> None:
    """Copy a job's output (``stream``) to its output.log and to this process's stdout, line by line, each
    line prefixed (``[#N] `` when jobs run side by side) and printed under ``print_lock``; a progress bar's
    carriage-return updates are shown once, at the end of their line."""
    def emit(line: bytes) -> None:
        parts = [p for p in line.split(b"\r") if p.strip()]
        text = parts[-1].decode(errors="replace") if parts else ""
        with print_lock:
            sys.stdout.write(f"{prefix}{text}\n")
            sys.stdout.flush()

    pending = b""
    with open(log_path, "wb") as logfile:
        while True:
            chunk = stream.read1(65536)
            if not chunk:
                break
            logfile.write(chunk)
            logfile.flush()
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                emit(line)
        if pending:
            emit(pending)
    stream.close()


@dataclass
class Job:
    """One job of a launch: its composed config, folder and files, its slot and process once started."""

    num: int
    overrides: List[str]
    config: DictConfig
    run_dir: Path
    job_file: Path
    result_file: Path
    slot: object = None
    proc: Optional[subprocess.Popen] = None
    pump: Optional[threading.Thread] = None
    started: float = 0.0
    record_before: Optional[str] = None  # the folder's metrics.json run_id before this launch
    had_result: bool = False  # the job process wrote its JobReturn (it ran to the end of run_job)
    info_before: Optional[dict] = None  # the folder's launcher.json before this launch (a resumed sweep)
    info: Dict[str, object] = field(default_factory=dict)


def collect(job: Job, fastpipe_task: bool) -> JobReturn:
    """The job's JobReturn once its process has ended: run_job's own from the job process, else one
    filled here (a fastpipe job whose process died gets a failed record: a failed row)."""
    from fastpipe.record import results
    from fastpipe.sweeps.objective import job_return_value

    code = job.proc.returncode
    if job.pump is not None:
        job.pump.join(timeout=10)
    record = results.read(job.run_dir)
    skipped = (code == 0 and record is not None and record.get("status") == "ok"
               and record.get("run_id") == job.record_before)  # sweep.resume: measured earlier
    job.info.update(ended=time.time(), exitcode=code)
    if not skipped:
        write_json(job.run_dir / LAUNCHER_FILE, job.info)
    elif job.info_before is not None:  # the launcher record of the run that measured it
        write_json(job.run_dir / LAUNCHER_FILE, job.info_before)
    else:  # measured by another launcher: no launcher record
        (job.run_dir / LAUNCHER_FILE).unlink(missing_ok=True)
    outcome = None
    if job.result_file.is_file():
        with contextlib.suppress(Exception), open(job.result_file, "rb") as fh:
            outcome = pickle.load(fh)
    job.had_result = outcome is not None
    for path in (job.result_file, job.job_file):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    if isinstance(outcome, JobReturn):  # run_job's own, from the job process
        return outcome
    ret = job_return(job)
    if outcome is not None:  # the job could not be set up in its process: the sweep raises it
        ret.status, ret.return_value = JobStatus.FAILED, outcome["error"]
        return ret
    if code not in (0, 2, 75, 130):
        if not fastpipe_task:  # another app's job died: as a job that raised, under the basic launcher
            ret.status, ret.return_value = JobStatus.FAILED, RuntimeError(
                f"the job process {death(code)}; see {job.run_dir / OUTPUT_FILE}")
            return ret
        began = record is not None and record.get("run_id") != job.record_before
        if not began or record.get("status") == "running":  # it died before recording its outcome
            record = record_death(job, code, record if began else None)
    ret.status = JobStatus.COMPLETED  # fastpipe's failed row (a dead job), or a job that ended the sweep
    ret.return_value = job_return_value(record, job.config)
    return ret


def job_return(job: Job) -> JobReturn:
    """A JobReturn for a job whose process did not send its own, filled as run_job fills it."""
    ret = JobReturn()
    ret.overrides = list(job.overrides)
    task_cfg = copy.deepcopy(job.config)
    with read_write(task_cfg), open_dict(task_cfg):
        del task_cfg["hydra"]
    ret.cfg = task_cfg
    ret.hydra_cfg = OmegaConf.masked_copy(job.config, "hydra")
    ret.working_dir = str(job.run_dir) if job.config.hydra.job.chdir else os.getcwd()
    ret.task_name = str(job.config.hydra.job.name)
    return ret


def record_death(job: Job, code: int, running: Optional[dict]) -> dict:
    """metrics.json of a fastpipe job whose process died before it recorded an outcome."""
    from fastpipe.config import job_choices
    from fastpipe.record import results
    from fastpipe.record.run_record import failed

    choices = job_choices(job.config.hydra.runtime.choices, job.config)
    overrides = [str(o) for o in OmegaConf.to_container(job.config.hydra.overrides.task, resolve=False)]
    record = failed(f"the job process {death(code)} before it recorded an outcome; see {job.run_dir / OUTPUT_FILE}",
                    choices, overrides, run_id=(running or {}).get("run_id"))
    if running is None:  # it never began: an earlier run's record moves to metrics.previous.json
        results.begin(job.run_dir, choices, overrides, run_id=None)
    results.write(job.run_dir, record)
    from fastpipe.record.loggers import trackers_file

    trackers_file.settle(job.run_dir, record.to_dict())  # the tracker runs it began and could not end
    return record.to_dict()
