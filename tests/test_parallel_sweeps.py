"""hydra/launcher=gpus: slots of GPUs and cores (fast), and real parallel sweeps on the CPU (slow): two jobs
at once, the same report as a serial sweep plus the gpus column, a stop signal, resume."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, TINY
from fastpipe.errors import EXIT_PREEMPTED, ConfigError
from fastpipe.sweeps.slots import Slot, plan_slots, split_cores

HERE = Path(__file__).resolve().parent
PARALLEL = ["hydra/launcher=gpus", "hydra.launcher.max_parallel=2"]


# ------------------------------------------------------------------ slots (fast)
def test_one_job_per_gpu_by_default_with_the_cores_shared_out():
    slots = plan_slots(["0", "1", "2", "3"], list(range(16)), gpus_per_job=1, max_parallel=None)
    assert [s.gpus for s in slots] == [("0",), ("1",), ("2",), ("3",)]
    assert [s.cpus for s in slots] == [tuple(range(4 * k, 4 * k + 4)) for k in range(4)]
    ddp = plan_slots(["0", "1", "2", "3", "4"], list(range(10)), gpus_per_job=2, max_parallel=None)
    assert [s.gpus for s in ddp] == [("0", "1"), ("2", "3")]  # GPU 4 left over: a job never gets half its GPUs
    uuids = plan_slots(["GPU-a", "GPU-b"], [0, 1], 1, 1)
    assert uuids == [Slot(0, ("GPU-a",), (0, 1))]  # max_parallel below the GPUs: the first slot, every core


def test_cpu_only_runs_one_job_unless_told_and_never_more_than_the_cores():
    assert plan_slots([], [0, 1], None, None) == [Slot(0, (), (0, 1))]  # gpus_per_job unset: 0 without GPUs
    assert plan_slots([], [0, 1], 0, 2) == [Slot(0, (), (0,)), Slot(1, (), (1,))]
    assert plan_slots(["0"], [0, 1], 0, 2)[1].gpus == ()  # gpus_per_job=0: CPU jobs on a GPU machine
    assert plan_slots(["0", "1"], [0, 1], None, None)[1].gpus == ("1",)  # unset: 1 each where GPUs are
    with pytest.raises(ConfigError, match="max_parallel=3 but this sweep may use 2 CPU core"):
        plan_slots([], [0, 1], 0, 3)
    with pytest.raises(ConfigError, match=r"^hydra.launcher.gpus_per_job=1 but this sweep sees no GPU \(NVML finds no "
                                          r"GPU\); set hydra.launcher.gpus_per_job=0 to run the jobs on the CPU$"):
        plan_slots([], [0, 1], 1, None)  # asked for GPUs it cannot have: refused, not run on the CPU
    with pytest.raises(ConfigError, match=r"sees no GPU \(CUDA_VISIBLE_DEVICES=''\)"):
        plan_slots([], [0, 1], 2, None, "CUDA_VISIBLE_DEVICES=''")
    with pytest.raises(ConfigError, match="need 4 GPUs but 2 are visible"):
        plan_slots(["0", "1"], list(range(8)), 2, 2)
    with pytest.raises(ConfigError, match="gpus_per_job=2 but 1 GPU"):
        plan_slots(["0"], [0], 2, None)
    assert split_cores([5, 1, 2, 3, 4], 2) == [(1, 2, 3), (4, 5)]


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    from hydra_plugins.fastpipe_sweeps.gpus_launcher import visible_gpus

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert visible_gpus()[0] == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-x,-1,4")  # CUDA stops at the first invalid entry
    assert visible_gpus()[0] == ["GPU-x"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus()[0] == []


def test_the_gpus_column_names_the_gpu_that_measured_the_row():
    from fastpipe.report.timing import gpus_text

    assert gpus_text({"gpus": ["2", "3"]}) == "2,3" and gpus_text({"gpus": []}) == "cpu"
    assert gpus_text(None, {"device": "cuda:0", "world_size": 1}) == "0"  # a serial sweep on a GPU
    assert gpus_text(None, {"device": "cuda:0", "world_size": 1, "visible_devices": "5"}) == "5"
    assert gpus_text(None, {"device": "cpu", "world_size": 1}) is None and gpus_text(None, None) is None


def test_the_task_function_is_found_again_in_a_fresh_process():
    import pickle

    import cloudpickle
    from hydra_plugins.fastpipe_sweeps._child import load_task
    from hydra_plugins.fastpipe_sweeps.gpus_launcher import task_for_job

    from fastpipe.report.publish import write_report  # any plain function

    def local_task(cfg):  # not importable by module and name: travels by value
        return ("local", cfg)

    assert load_task(pickle.loads(cloudpickle.dumps(task_for_job(write_report)))) is write_report
    assert load_task(pickle.loads(cloudpickle.dumps(task_for_job(local_task))))(1) == ("local", 1)
    assert load_task(("module", "fastpipe.__main__", "run")).__name__ == "run"  # unwrapped from @hydra.main


# ------------------------------------------------------------------ real sweeps (slow)
def sweep(sweep_dir: Path, args, timeout=300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(REPO)]))
    return subprocess.run([sys.executable, "-m", "fastpipe", "-m", *args, f"hydra.sweep.dir={sweep_dir}"],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)


def read_csv(path: Path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def span(job_dir: Path):
    """When a job ran, by its own files: its Hydra record (written as it starts) to its metrics.json."""
    return (job_dir / ".hydra" / "hydra.yaml").stat().st_mtime, (job_dir / "metrics.json").stat().st_mtime


@pytest.fixture(scope="module")
def parallel_sweep(tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("parallel") / "sweep"
    proc = sweep(sweep_dir, PARALLEL + ["precision=fp32,amp"] + TINY)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return sweep_dir, proc


@pytest.mark.slow
def test_two_jobs_run_at_once_each_on_its_own_core(parallel_sweep):
    sweep_dir, proc = parallel_sweep
    (s0, e0), (s1, e1) = span(sweep_dir / "0"), span(sweep_dir / "1")
    assert max(s0, s1) < min(e0, e1), "the two jobs' runs did not overlap"
    info = [json.loads((sweep_dir / str(n) / "launcher.json").read_text()) for n in (0, 1)]
    assert max(i["started"] for i in info) < min(i["ended"] for i in info)
    assert sorted(tuple(i["cpus"]) for i in info) == [(0,), (1,)] and all(i["gpus"] == [] for i in info)
    assert all(i["exitcode"] == 0 for i in info)
    assert "[#0] fastpipe run summary" in proc.stdout and "[#1] fastpipe run summary" in proc.stdout
    assert "fastpipe run summary" in (sweep_dir / "0" / "output.log").read_text()
    assert not (sweep_dir / ".launcher").exists()  # the job files are cleaned up


@pytest.mark.slow
def test_parallel_report_has_the_serial_columns_plus_gpus(parallel_sweep, tmp_path):
    sweep_dir, _ = parallel_sweep
    serial_dir = tmp_path / "serial"
    serial = sweep(serial_dir, ["precision=fp32,amp"] + TINY)
    assert serial.returncode == 0, serial.stderr[-3000:]
    par_rows, ser_rows = read_csv(sweep_dir / "report.csv"), read_csv(serial_dir / "report.csv")
    assert list(par_rows[0]) == list(ser_rows[0])  # the same CSV columns, gpus among them
    assert all(r["status"] == "ok" for r in par_rows + ser_rows) and len(par_rows) == 2
    assert {r["gpus"] for r in par_rows} == {"cpu"} and {r["gpus"] for r in ser_rows} == {""}
    assert {r["precision"] for r in par_rows} == {"fp32", "amp"}
    assert next(r for r in par_rows if r["baseline"] == "True")["precision"] == "fp32"

    def header(folder):
        return next(line for line in (folder / "report.md").read_text().splitlines() if line.startswith("| job"))

    par_head, ser_head = header(sweep_dir).split(" | "), header(serial_dir).split(" | ")
    assert par_head == ser_head[:2] + ["gpus"] + ser_head[2:]
    assert (sweep_dir / "best.yaml").is_file() and (sweep_dir / "hparams").is_dir()


@pytest.mark.slow
def test_a_stop_signal_ends_a_parallel_sweep_with_75_and_resume_finishes_it(tmp_path):
    slow = ["model._target_=fault_models.Slow", "+model.sleep_s=0.3", "launcher.fresh_process=false"]
    args = PARALLEL + ["precision=fp32,amp"] + [t for t in TINY if not t.startswith("train.max_steps")] + slow + \
        ["train.max_steps=30", "train.checkpoint_every=0"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(REPO)]))
    proc = subprocess.Popen([sys.executable, "-m", "fastpipe", "-m", *args, f"hydra.sweep.dir={tmp_path}"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not all((tmp_path / str(n) / "tb").is_dir() for n in (0, 1)):  # both jobs are training
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read().decode()[-3000:]
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_PREEMPTED, stderr.decode()[-3000:]
    assert "stopped by SIGTERM" in stderr.decode() and "sweep.resume=true" in stderr.decode()
    for n in (0, 1):  # the signal reached both running jobs: each checkpointed and stopped
        m = json.loads((tmp_path / str(n) / "metrics.json").read_text())
        assert m["status"] == "preempted" and m["steps"] < 30, m["reason"]
    assert not (tmp_path / "report.md").exists()  # as in a serial sweep: stopped, not reported
    resumed = sweep(tmp_path, args + ["sweep.resume=true"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = read_csv(tmp_path / "report.csv")
    assert [r["status"] for r in rows] == ["ok", "ok"]
    for n in (0, 1):
        m = json.loads((tmp_path / str(n) / "metrics.json").read_text())
        assert m["steps"] == 30 and any("at step" in w for w in m["warnings"])  # continued from its checkpoint


@pytest.mark.slow
def test_a_job_process_that_dies_is_a_failed_row_and_resume_skips_the_finished_job(tmp_path):
    conf = tmp_path / "conf"
    (conf / "case").mkdir(parents=True)
    (conf / "case" / "plain.yaml").write_text("# @package _global_\n{}\n")
    (conf / "case" / "killed.yaml").write_text("# @package _global_\nmodel:\n  _target_: killmod.Killed\n")
    (tmp_path / "killmod.py").write_text(  # the job process dies of SIGKILL, as under the out-of-memory killer
        "import os, signal\nclass Killed:\n    def __init__(self, num_classes=4):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n")
    args = ["--config-dir", str(conf)] + PARALLEL + ["+case=plain,killed", "launcher.fresh_process=false"] + TINY
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(HERE), str(REPO)]))

    def run(extra=()):
        return subprocess.run([sys.executable, "-m", "fastpipe", "-m", *args, *extra,
                               f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                              cwd=REPO, capture_output=True, text=True, timeout=300, env=env)

    proc = run()
    assert proc.returncode == 0, proc.stderr[-3000:]  # a dead job is a row; the sweep goes on
    rows = {r["case"]: r for r in read_csv(tmp_path / "sweep" / "report.csv")}
    assert rows["plain"]["status"] == "ok" and rows["plain"]["best"] == "True"
    assert rows["killed"]["status"] == "failed" and "job process killed by SIGKILL" in rows["killed"]["reason"]
    assert json.loads((tmp_path / "sweep" / "1" / "launcher.json").read_text())["exitcode"] == -signal.SIGKILL
    measured = (tmp_path / "sweep" / "0" / "launcher.json").read_text()
    again = run(["sweep.resume=true"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("finished ok earlier; skipped") == 1  # the ok job; the failed one ran again
    assert (tmp_path / "sweep" / "0" / "launcher.json").read_text() == measured  # where and when it was measured
