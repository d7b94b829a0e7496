"""hydra/launcher=gpus: slots of GPUs and cores (fast), and real parallel sweeps on the CPU (slow): two jobs
at once, the same report as a serial sweep plus the gpus column, a stop signal, resume."""
from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, TINY, held_model, run_sweep
from fastpipe.errors import EXIT_PREEMPTED

PARALLEL = ["hydra/launcher=gpus", "hydra.launcher.max_parallel=2"]


# ------------------------------------------------------------------ real sweeps (slow)
def sweep(sweep_dir: Path, args) -> subprocess.CompletedProcess:
    """The sweep in this process; its jobs in their slots' processes, which the gpus launcher starts."""
    return run_sweep(sweep_dir, args)


def read_csv(path: Path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def span(job_dir: Path):
    """When a job ran, by its own files: its Hydra record (written as it starts) to its metrics.json."""
    return (job_dir / ".hydra" / "hydra.yaml").stat().st_mtime, (job_dir / "metrics.json").stat().st_mtime


@pytest.fixture(scope="module")
def stopped_sweep(tmp_path_factory):
    """A parallel sweep (fp32 and amp, each job training in its slot's process) stopped by SIGTERM while both
    jobs train, then resumed to its end: {"dir", "stop": (exit code, stderr), "stopped": each job's metrics
    and whether a report was written when it stopped, "resumed": the finished resume}."""
    sweep_dir = tmp_path_factory.mktemp("parallel") / "sweep"
    hold = sweep_dir.parent / "jobs.hold"  # both jobs wait in step 7 until the signal reaches them
    held = held_model(hold)
    args = PARALLEL + ["precision=fp32,amp"] + [t for t in TINY if not t.startswith("train.max_steps")] + held + \
        ["train.max_steps=30", "train.checkpoint_every=0"]
    proc = subprocess.Popen([sys.executable, "-m", "fastpipe", "-m", *args, f"hydra.sweep.dir={sweep_dir}"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not all((sweep_dir / str(n) / "tb").is_dir() for n in (0, 1)):  # both jobs are training
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read().decode()[-3000:]
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    records = [sweep_dir / str(n) / "metrics.json" for n in (0, 1)]
    stopped = {"jobs": [json.loads(p.read_text()) if p.exists() else {"status": None, "steps": None, "reason": None}
                        for p in records], "report": (sweep_dir / "report.md").exists()}
    hold.unlink()  # the resumed jobs train straight through
    return {"dir": sweep_dir, "stop": (proc.returncode, stderr.decode()), "stopped": stopped,
            "resumed": sweep(sweep_dir, args + ["sweep.resume=true"])}


@pytest.fixture(scope="module")
def parallel_sweep(stopped_sweep):
    """The resume above: a parallel sweep of two jobs run to its end, each in its slot's process (the
    slot's process is the subject)."""
    proc = stopped_sweep["resumed"]
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return stopped_sweep["dir"], proc


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


def test_parallel_report_has_the_serial_columns_plus_gpus(parallel_sweep, grid_sweep):
    """Against the serial grid sweep of conftest (precision x compile over TINY): the same columns but
    for compile, which only the grid sweeps."""
    sweep_dir, _ = parallel_sweep
    serial_dir, _ = grid_sweep
    par_rows, ser_rows = read_csv(sweep_dir / "report.csv"), read_csv(serial_dir / "report.csv")
    assert list(par_rows[0]) == [c for c in ser_rows[0] if c != "compile"]  # the same CSV columns, gpus among them
    assert all(r["status"] == "ok" for r in par_rows + ser_rows) and len(par_rows) == 2
    assert {r["gpus"] for r in par_rows} == {"cpu"} and {r["gpus"] for r in ser_rows} == {""}
    assert {r["precision"] for r in par_rows} == {"fp32", "amp"}
    assert next(r for r in par_rows if r["baseline"] == "True")["precision"] == "fp32"

    def header(folder):
        return next(line for line in (folder / "report.md").read_text().splitlines() if line.startswith("| job"))

    par_head = header(sweep_dir).split(" | ")
    ser_head = [cell for cell in header(serial_dir).split(" | ") if cell != "compile"]
    assert par_head == ser_head[:2] + ["gpus"] + ser_head[2:]
    named = any(r["best"] == "True" for r in par_rows)  # one run each: a winner only beyond the noise (issue 54)
    assert (sweep_dir / "best.yaml").is_file() == named and (sweep_dir / "hparams").is_dir()


def test_a_stop_signal_ends_a_parallel_sweep_with_75_and_resume_finishes_it(stopped_sweep, parallel_sweep):
    code, stderr = stopped_sweep["stop"]
    assert code == EXIT_PREEMPTED, stderr[-3000:]
    assert "stopped by SIGTERM" in stderr and "sweep.resume=true" in stderr
    for m in stopped_sweep["stopped"]["jobs"]:  # the signal reached both running jobs: each checkpointed and stopped
        assert m["status"] == "preempted" and m["steps"] < 30, m["reason"]
    assert not stopped_sweep["stopped"]["report"]  # as in a serial sweep: stopped, not reported
    sweep_dir, _ = parallel_sweep  # the resume finished
    rows = read_csv(sweep_dir / "report.csv")
    assert [r["status"] for r in rows] == ["ok", "ok"]
    for n in (0, 1):
        m = json.loads((sweep_dir / str(n) / "metrics.json").read_text())
        assert m["steps"] == 30 and any("at step" in w for w in m["warnings"])  # continued from its checkpoint


def test_a_job_process_that_dies_is_a_failed_row_and_resume_skips_the_finished_job(tmp_path):
    conf = tmp_path / "conf"
    (conf / "case").mkdir(parents=True)
    (conf / "case" / "plain.yaml").write_text("# @package _global_\n{}\n")
    (conf / "case" / "killed.yaml").write_text("# @package _global_\nmodel:\n  _target_: killmod.Killed\n")
    (tmp_path / "killmod.py").write_text(  # the job process dies of SIGKILL, as under the out-of-memory killer
        "import os, signal\nclass Killed:\n    def __init__(self, num_classes=4):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n")
    args = ["--config-dir", str(conf)] + PARALLEL + ["+case=plain,killed"] + TINY

    def run(extra=()):
        return run_sweep(tmp_path / "sweep", [*args, *extra], tmp_path)  # killmod.py

    proc = run()
    assert proc.returncode == 0, proc.stderr[-3000:]  # a dead job is a row; the sweep goes on
    rows = {r["case"]: r for r in read_csv(tmp_path / "sweep" / "report.csv")}
    assert rows["plain"]["status"] == "ok" and rows["plain"]["best"] == "True"  # the only job that could win
    assert rows["killed"]["status"] == "failed" and "job process killed by SIGKILL" in rows["killed"]["reason"]
    assert json.loads((tmp_path / "sweep" / "1" / "launcher.json").read_text())["exitcode"] == -signal.SIGKILL
    measured = (tmp_path / "sweep" / "0" / "launcher.json").read_text()
    again = run(["sweep.resume=true"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("finished ok earlier; skipped") == 1  # the ok job; the failed one ran again
    assert (tmp_path / "sweep" / "0" / "launcher.json").read_text() == measured  # where and when it was measured
