"""Preemption: a real SIGTERM / SIGUSR1 to a real run checkpoints it and exits 75: a single run, whose loop
gets the signal directly, and a job in a fresh training process, to which its launching process passes it."""
from __future__ import annotations

import json
import signal

import pytest

from conftest import RESUMABLE, RESUMABLE_TOTAL, held_model, run_in_process, start_run, wait_for
from fastpipe.checkpoint.disk import verify
from fastpipe.errors import EXIT_PREEMPTED


@pytest.mark.parametrize("sig,fresh_process", [(signal.SIGTERM, "auto"), (signal.SIGUSR1, "true")])
def test_stop_signal_checkpoints_and_exits_then_resume_completes(sig, fresh_process, tmp_path):
    # checkpoint_every=0: the signal writes a checkpoint even with periodic ones off. With a fresh
    # training process the signal goes to the launching process, which forwards it.
    hold = tmp_path.parent / f"{tmp_path.name}.hold"  # the run waits in step 7 until the signal comes
    process = start_run(tmp_path, [f"launcher.fresh_process={fresh_process}", "train.checkpoint_every=0",
                                *held_model(hold)])
    wait_for(tmp_path / "tb", process)  # first scalars written: training is under way
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == EXIT_PREEMPTED == 75, stderr.decode()[-2000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    step = metrics["steps"]
    assert metrics["status"] == "preempted" and 2 <= step <= 7  # step 7 at the latest: the held one
    line = f"stopped by {sig.name} at step {step}: checkpoint {tmp_path}/checkpoints/step-{step:08d}.pt written"
    assert line in metrics["reason"] and line in stderr.decode()
    assert f"train.resume=auto hydra.run.dir={tmp_path}" in metrics["reason"]
    checkpoint = tmp_path / "checkpoints" / f"step-{step:08d}.pt"
    assert metrics["checkpoint"] == str(checkpoint) and verify(checkpoint) is None
    resumed = run_in_process(tmp_path, RESUMABLE + [f"train.max_steps={RESUMABLE_TOTAL}", "train.resume=auto"])
    assert resumed["status"] == "ok" and resumed["steps"] == RESUMABLE_TOTAL
    assert any(f"at step {step} " in w for w in resumed["warnings"])


def test_stop_signal_ends_a_sweep_and_sweep_resume_continues_the_stopped_job(tmp_path):
    """SIGTERM to a sweep reaches the running job's training process, which checkpoints, and stops the sweep
    (exit 75), instead of going on to the next job; re-running with sweep.resume=true continues that job
    from its checkpoint."""
    import subprocess
    import sys

    from conftest import REPO, run_sweep

    hold = tmp_path.parent / f"{tmp_path.name}.hold"  # job 0 waits in step 7 until the signal comes
    args = RESUMABLE + held_model(hold) + [f"train.max_steps={RESUMABLE_TOTAL}", "precision=fp32,amp"]
    sweep = subprocess.Popen([sys.executable, "-m", "fastpipe", "-m", *args, f"hydra.sweep.dir={tmp_path}"], cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for(tmp_path / "0" / "tb", sweep)
    sweep.send_signal(signal.SIGTERM)
    _, stderr = sweep.communicate(timeout=120)
    assert sweep.returncode == EXIT_PREEMPTED, stderr.decode()[-2000:]
    stopped = json.loads((tmp_path / "0" / "metrics.json").read_text())
    assert stopped["status"] == "preempted" and not (tmp_path / "1").exists()  # the sweep did not go on
    hold.unlink()  # the resumed jobs train straight through (in the sweep's process: the resume is the subject)
    resumed = run_sweep(tmp_path, args + ["sweep.resume=true", "launcher.fresh_process=false"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    first = json.loads((tmp_path / "0" / "metrics.json").read_text())
    assert first["status"] == "ok" and first["steps"] == RESUMABLE_TOTAL
    assert any(f"at step {stopped['steps']} " in w for w in first["warnings"])
    assert json.loads((tmp_path / "1" / "metrics.json").read_text())["status"] == "ok"
