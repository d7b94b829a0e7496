"""``hydra/launcher=gpus``: a sweep's jobs run concurrently, one slot of GPUs and CPU cores per job.

Each job runs in a fresh Python process (``_child.py``) that executes Hydra's own ``run_job`` on the
job's config, composed here exactly as Hydra's BasicLauncher composes it: the job's folder, callbacks
(the run-folder lock, ``.hydra/``), ``hydra.job.chdir``, ``hydra.mode=MULTIRUN`` and the task function
are those of a basic sweep, so a failed job is a failed row, ``sweep.resume`` skips finished jobs, and
the report is the same. The task function and Hydra's singleton state (the ConfigStore, registered
resolvers) travel pickled with cloudpickle, as under Hydra's joblib and submitit launchers, so any
Hydra app can use this launcher; it passes Hydra's ``LauncherTestSuite`` and ``IntegrationTestSuite``. The process sees only its slot's GPUs (``CUDA_VISIBLE_DEVICES``) and runs on
its slot's cores (CPU affinity); fastpipe's job trains in it (``launcher.fresh_process=auto``).

The launcher writes ``launcher.json`` into each job folder (slot, GPUs, cores, start and end time,
exit code: the report's ``gpus`` column) and ``output.log`` (the job's stdout and stderr, which it
also prints, each line prefixed ``[#N]`` when jobs run side by side).

Stop signals (stopping.py): SIGTERM/SIGUSR1/SIGUSR2 to the sweep process are forwarded to every running job (each stops
and checkpoints as a serial job would), no further job starts, and the sweep ends with exit code 75
once they have stopped; ``sweep.resume=true`` continues it. Ctrl-C reaches every job (one process
group) and ends the sweep with 130.
"""

import contextlib
import json
import logging
import os
import pickle
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import cloudpickle
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, configure_log, filter_overrides, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from hydra_plugins.fastpipe_sweeps.devices import describe_gpus, visible_gpus
from hydra_plugins.fastpipe_sweeps.gpus_job import (LAUNCHER_FILE, OUTPUT_FILE, Job, collect, pump_output, task_for_job,
                                                write_json)
from hydra_plugins.fastpipe_sweeps.stopping import SweepStop

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]  # the folder that holds hydra_plugins/ (and, installed, fastpipe/)
CHILD = ("import sys; sys.path.insert(0, {root!r}); from hydra_plugins.fastpipe_sweeps._child import entry; "
         "sys.exit(entry(sys.argv[1]))")
GRACE_S = 30.0  # after Ctrl-C: how long jobs get to record that they were interrupted


def refuse(exc: Exception) -> None:
    """fastpipe's way with a setting that cannot work: one line, exit code 2, nothing started."""
    from fastpipe.errors import EXIT_CODE

    print(f"fastpipe: error: {exc}", file=sys.stderr, flush=True)
    sys.exit(EXIT_CODE)


class GpusLauncher(Launcher):
    def __init__(self, gpus_per_job: Optional[int] = None, max_parallel: Optional[int] = None) -> None:
        super().__init__()
        self.gpus_per_job, self.max_parallel = gpus_per_job, max_parallel
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.task_function: Optional[TaskFunction] = None
        self.slots: list = []
        self.task = None  # the task function as it travels (task_for_job)
        self.fastpipe_task = False
        self._singletons = None  # Hydra's singleton state, taken at launch
        self._stop = SweepStop()
        self.during: Optional[str] = None  # set by a sweeper launching its own batches: "the race stopped during ..."
        self._print_lock = threading.Lock()

    # ------------------------------------------------------------------ Hydra's Launcher interface
    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from fastpipe.errors import ConfigError
        from fastpipe.sweeps.slots import plan_slots

        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function
        self.gpu_ids, self.pci_order, gpus_from = visible_gpus()
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
        try:
            self.slots = plan_slots(self.gpu_ids, cores, self.gpus_per_job, self.max_parallel, gpus_from)
        except ConfigError as exc:
            refuse(exc)
        self.task = task_for_job(task_function)
        # fastpipe's own task records every run in metrics.json: a job process that dies is a failed row
        self.fastpipe_task = self.task[1:2] == ("fastpipe.__main__",) if isinstance(self.task, tuple) else (
            getattr(task_function, "__module__", None) == "fastpipe.__main__")

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        assert self.config is not None and self.hydra_context is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(job_overrides)} jobs, {len(self.slots)} at a time: "
                 + "; ".join(s.describe() for s in self.slots))
        self._singletons = Singleton.get_state()  # as at launch: registered resolvers, the ConfigStore, ...
        jobs = []
        for idx, overrides in enumerate(job_overrides):
            num = initial_job_idx + idx
            log.info(f"\t#{num} : {' '.join(filter_overrides(overrides))}")
            jobs.append(self._prepare(num, list(overrides), sweep_dir))
        returns = self._run(jobs)
        with contextlib.suppress(OSError):
            (sweep_dir / ".launcher").rmdir()  # the job files are gone once their jobs are collected
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return [returns[job.num] for job in jobs]

    # ------------------------------------------------------------------ one job
    def _prepare(self, num: int, overrides: List[str], sweep_dir: Path) -> Job:
        """The job's config, composed and numbered as BasicLauncher does, its folder resolved here (a
        fresh process would resolve ``${now:...}`` anew)."""
        config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        previous = HydraConfig.instance().cfg
        with open_dict(config):
            config.hydra.job.id = num
            config.hydra.job.num = num
        HydraConfig.instance().set_config(config)
        try:
            subdir = str(OmegaConf.select(config, "hydra.sweep.subdir"))
        finally:
            HydraConfig.instance().cfg = previous
        with read_write(config.hydra), open_dict(config.hydra):
            config.hydra.sweep.dir = str(sweep_dir)
            config.hydra.sweep.subdir = subdir
        work = sweep_dir / ".launcher"
        return Job(num, overrides, config, sweep_dir / subdir, work / f"job-{num}.pkl", work / f"job-{num}.result")

    def _env(self, slot) -> Dict[str, str]:
        env = dict(os.environ)
        if slot.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(slot.gpus)
            if self.pci_order:  # the indices handed out are NVML's (nvidia-smi's): make CUDA count the same way
                env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        elif self.gpu_ids:  # gpus_per_job=0 on a GPU machine: CPU jobs must not touch a GPU
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env

    def _start(self, job: Job, slot) -> None:
        from fastpipe.record import results

        job.slot = slot
        job.run_dir.mkdir(parents=True, exist_ok=True)
        job.job_file.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            job.result_file.unlink()
        payload = cloudpickle.dumps({"config": job.config, "task": self.task, "singletons": self._singletons})
        with open(job.job_file, "wb") as fh:  # what the job reads first is plain; the payload loads after
            pickle.dump({"sys_path": list(sys.path), "cpus": list(slot.cpus), "parent": os.getpid(),
                         "result": str(job.result_file), "payload": payload}, fh)
        job.record_before = (results.read(job.run_dir) or {}).get("run_id")
        with contextlib.suppress(OSError, ValueError):
            job.info_before = json.loads((job.run_dir / LAUNCHER_FILE).read_text())
        job.started = time.time()
        job.info = {"launcher": "gpus", "job": job.num, "slot": slot.index, "gpus": list(slot.gpus),
                    "gpu_devices": describe_gpus(slot.gpus, self.pci_order), "cpus": list(slot.cpus),
                    "started": job.started, "ended": None, "exitcode": None}
        write_json(job.run_dir / LAUNCHER_FILE, job.info)
        job.proc = subprocess.Popen([sys.executable, "-c", CHILD.format(root=str(ROOT)), str(job.job_file)],
                                    env=self._env(slot), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        prefix = f"[#{job.num}] " if len(self.slots) > 1 else ""
        job.pump = threading.Thread(target=pump_output, args=(job.proc.stdout, prefix, job.run_dir / OUTPUT_FILE,
                                                              self._print_lock), name=f"job-{job.num}-output", daemon=True)
        job.pump.start()

    # ------------------------------------------------------------------ the pool
    def _run(self, jobs: List[Job]) -> Dict[int, JobReturn]:
        pending, running, returns = deque(jobs), {}, {}
        free = list(self.slots)
        self._stop = SweepStop()
        with self._stop.forwarding(running):
            try:
                while pending or running:
                    while pending and free and self._stop.code is None:
                        job = pending.popleft()
                        self._start(job, free.pop(0))
                        running[job.num] = job
                    time.sleep(0.05)
                    for num, job in list(running.items()):
                        if job.proc.poll() is None:
                            continue
                        del running[num]
                        free.append(job.slot)
                        free.sort(key=lambda s: s.index)
                        returns[num] = collect(job, self.fastpipe_task)
                        self._stop.after(job, running)
            except KeyboardInterrupt:  # Ctrl-C reached every job too (one process group): let them record it
                deadline = time.time() + GRACE_S
                for job in running.values():
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        job.proc.wait(timeout=max(0.1, deadline - time.time()))
                    if job.proc.poll() is None:
                        job.proc.kill()
                raise
        self._stop.end_sweep(len(pending), self.during)
        return returns
