"""One process per single run: where each job trains (``launcher.fresh_process``), what a run leaves in the
process it ran in (nothing), what may touch CUDA before the run's set-up (only after the allocator's
settings are in place), what Hydra's job log prints (not torch's INFO lines), and how a run whose
process died outright reads."""
from __future__ import annotations

import json
import logging
import os
import random
import signal
import sys

import numpy as np
import pytest
import torch

from conftest import TINY, in_process, make_settings
from fastpipe.launch.dispatch import JOB_PROCESS_LAUNCHERS, own_job_process, resolve_fresh_process
from fastpipe.record import results
from fastpipe.record.run_record import failed
from fastpipe.record.runlock import RunLock

GPUS = JOB_PROCESS_LAUNCHERS[0]


@pytest.mark.parametrize("given, sweep, launcher, repeats, fresh", [
    ("auto", False, "", 1, False),  # a single run: the process the user started
    ("auto", True, "hydra._internal.core_plugins.basic_launcher.BasicLauncher", 1, True),  # a sweep's job
    ("auto", True, GPUS, 1, False),  # a job in the process hydra/launcher=gpus started for it alone
    ("auto", False, "", 3, True),  # each repeat
    ("auto", True, GPUS, 3, True),
    (True, False, "", 1, True), (False, True, "", 3, False)])  # given: as given
def test_auto_trains_a_single_run_here_and_each_sweep_job_and_repeat_in_a_fresh_process(given, sweep, launcher,
                                                                                        repeats, fresh):
    settings = make_settings(TINY + [f"launcher.fresh_process={str(given).lower()}", f"report.repeats={repeats}"])
    resolve_fresh_process(settings, sweep, own_job_process(sweep, launcher))
    assert settings.launcher.fresh_process is fresh


def test_fresh_process_takes_auto_true_or_false():
    from fastpipe.errors import ConfigError

    with pytest.raises(ConfigError, match=r"launcher.fresh_process='sometimes': use auto, true or false"):
        make_settings(TINY + ["launcher.fresh_process=sometimes"])


def _state():
    return {"environ": dict(os.environ), "path": list(sys.path), "random": random.getstate(),
            "numpy": np.random.get_state()[1].tolist(), "torch": torch.get_rng_state().tolist(),
            "switches": (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32,
                         torch.backends.cuda.matmul.allow_tf32, torch.get_num_threads()),
            "signals": {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)},
            "filters": list(logging.getLogger("torch.utils.cpp_extension").filters)}


def test_a_run_leaves_the_process_as_it_found_it(tmp_path):
    """Two commands in one process, as a program or a test runs them: each one's seeds, torch switches,
    allocator setting, signal handlers and the working folder it put on sys.path are gone after it."""
    torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32 = False, False
    before = _state()
    for n, extra in enumerate((["seed=7", "precision.tf32=true", "runtime.cuda_alloc_conf=expandable_segments:True"],
                               ["seed=8", "runtime.cudnn_benchmark=true"])):
        done = in_process([*TINY, "train.max_steps=2", "logger=none", *extra, f"hydra.run.dir={tmp_path / str(n)}"],
                          cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        assert _state() == before


def test_the_allocator_setting_is_in_place_before_the_projects_modules_import(tmp_path, monkeypatch):
    """PYTORCH_CUDA_ALLOC_CONF is read once, as CUDA's caching allocator starts: a project module that touches
    CUDA as it imports (checked before the run builds anything) already finds runtime.cuda_alloc_conf set."""
    (tmp_path / "probe_alloc.py").write_text(
        "import os\nfrom fastpipe.models import TinyCNN\nSEEN = os.environ.get('PYTORCH_CUDA_ALLOC_CONF')\n"
        "class Net(TinyCNN):\n    pass\n")
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    done = in_process([*TINY, "train.max_steps=2", "logger=none", "model._target_=probe_alloc.Net",
                       "runtime.cuda_alloc_conf=expandable_segments:True",
                       f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    try:
        assert done.returncode == 0, done.stderr[-2000:]
        assert sys.modules["probe_alloc"].SEEN == "expandable_segments:True"
    finally:
        sys.modules.pop("probe_alloc", None)


def test_hydras_job_log_leaves_out_torchs_info_lines_and_keeps_its_warnings(tmp_path):
    """A single run trains under Hydra's job logging (INFO to the console): torch's own INFO lines (Inductor,
    the elastic agent) stay out, as in a process without it; its warnings, and other loggers' INFO, show."""
    (tmp_path / "probe_log.py").write_text(
        "import logging\nfrom fastpipe.models import TinyCNN\nclass Net(TinyCNN):\n"
        "    def __init__(self, num_classes=10):\n        super().__init__(num_classes)\n"
        "        logging.getLogger('torch._inductor.compile_fx').info('inductor info')\n"
        "        logging.getLogger('torch.distributed.elastic.agent.server').info('agent info')\n"
        "        logging.getLogger('torchvision.io').info('torchvision info')\n"
        "        logging.getLogger('torch.utils.data').warning('torch warning')\n"
        "        logging.getLogger('project').info('project info')\n")
    done = in_process([*TINY, "train.max_steps=2", "logger=none", "model._target_=probe_log.Net",
                       f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    sys.modules.pop("probe_log", None)
    assert done.returncode == 0, done.stderr[-2000:]
    text = done.stdout + done.stderr
    assert "project info" in text and "torch warning" in text
    assert "inductor info" not in text and "agent info" not in text and "torchvision info" not in text


def test_a_running_record_whose_folder_no_process_holds_reads_as_died(tmp_path):
    results.write(tmp_path, failed("the run did not finish", {}, [], run_id="r1", status="running"))
    assert results.outcome(tmp_path)["status"] == "running"  # no lock file: nothing tells whether it lives
    with RunLock(tmp_path, "run"):  # held (here: by this process, through its own open of the lock file)
        assert results.outcome(tmp_path)["status"] == "running"
    died = results.outcome(tmp_path)
    assert died["status"] == "failed" and died["run_id"] == "r1"
    assert died["reason"].startswith("its process died before it recorded an outcome")
    assert f"train.resume=auto hydra.run.dir={tmp_path}" in died["reason"]
    assert json.loads((tmp_path / "metrics.json").read_text())["status"] == "running"  # read, never rewritten
    lock = tmp_path / ".fastpipe.lock"
    lock.write_text(json.dumps({"pid": 1, "host": "another-host", "started": 0}))
    assert results.outcome(tmp_path)["status"] == "running"  # another host's lock: not this machine's to judge


def test_the_report_shows_a_job_whose_process_died_as_a_failed_row(tmp_path):
    from fastpipe.report.sweep_folder import load_jobs

    for num, status in ((0, "ok"), (1, "running")):
        job = tmp_path / str(num)
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "overrides.yaml").write_text(f"- seed={num}\n")
        record = failed("x", {}, [f"seed={num}"], run_id=f"r{num}", status="running")
        results.write(job, record.set(status="ok", reason=None) if status == "ok" else record)
        RunLock(job, "run").acquire().release()  # the job's process held the folder, and is gone
    ok, dead = load_jobs(tmp_path)
    assert ok.metrics["status"] == "ok"
    assert dead.metrics["status"] == "failed" and dead.metrics["reason"].startswith("its process died")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2])
def test_a_parallel_sweep_passes_every_stop_signal_on_to_its_running_jobs(sig, monkeypatch):
    """hydra/launcher=gpus: SIGUSR2 (submitit's time-limit warning) reaches the jobs as SIGTERM and SIGUSR1 do,
    and stops the sweep with 75, instead of ending the sweep's process and leaving its jobs to the
    parent-death signal."""
    from types import SimpleNamespace

    from hydra_plugins.fastpipe_sweeps import stopping

    sent = []
    monkeypatch.setattr(stopping.os, "kill", lambda pid, signum: sent.append((pid, signum)))
    stop = stopping.SweepStop()
    running = {0: SimpleNamespace(proc=SimpleNamespace(pid=4242))}
    with stop.forwarding(running):
        signal.getsignal(sig)(sig, None)
    assert sent == [(4242, sig)] and stop.code == 75 and stop.reason == f"stopped by {sig.name}"


def test_a_sweep_jobs_training_process_checkpoints_when_its_sweep_dies(monkeypatch):
    """The parent-death signal of a sweep job's training process (and of a gpus launcher's job process) is
    SIGTERM, its stop signal, not SIGKILL: a job whose sweep was killed checkpoints and stops."""
    from fastpipe.launch import dispatch

    asked = []
    monkeypatch.setattr(dispatch, "die_with_parent", lambda parent, how: asked.append(how) or (_ for _ in ()).throw(
        SystemExit(0)))
    with pytest.raises(SystemExit):
        dispatch._single_worker("unused", "unused", 1)
    assert asked == [signal.SIGTERM]
