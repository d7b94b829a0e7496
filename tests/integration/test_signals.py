"""Preemption: a real SIGTERM / SIGUSR1 to a real training process checkpoints it and exits 75."""
from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch

from conftest import RESUMABLE, RESUMABLE_TOTAL, held_model, run_in_process, start_run, wait_for
from fastpipe.checkpoint.files import verify
from fastpipe.errors import EXIT_PREEMPTED


@pytest.mark.parametrize("sig,fresh_process", [(signal.SIGTERM, True), (signal.SIGUSR1, False)])
def test_stop_signal_checkpoints_and_exits_then_resume_completes(sig, fresh_process, tmp_path):
    # checkpoint_every=0: the signal writes a checkpoint even with periodic ones off. With a fresh
    # training process the signal goes to the Hydra process, which forwards it.
    hold = tmp_path.parent / f"{tmp_path.name}.hold"  # the run waits in step 7 until the signal comes
    process = start_run(tmp_path, [f"launcher.fresh_process={str(fresh_process).lower()}", "train.checkpoint_every=0",
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
    """SIGTERM to a sweep checkpoints the running job and stops the sweep (exit 75), instead of going
    on to the next job; re-running with sweep.resume=true continues that job from its checkpoint."""
    import subprocess
    import sys

    from conftest import REPO

    hold = tmp_path.parent / f"{tmp_path.name}.hold"  # job 0 waits in step 7 until the signal comes
    # The jobs train in the sweep's process; a job's own training process ending with 75 stops a sweep too
    # (test_reliability.py: a stop signal while the job starts up).
    args = ([sys.executable, "-m", "fastpipe", "-m"] + RESUMABLE + held_model(hold) +
            [f"train.max_steps={RESUMABLE_TOTAL}", "precision=fp32,amp", "launcher.fresh_process=false",
             f"hydra.sweep.dir={tmp_path}"])
    sweep = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for(tmp_path / "0" / "tb", sweep)
    sweep.send_signal(signal.SIGTERM)
    _, stderr = sweep.communicate(timeout=120)
    assert sweep.returncode == EXIT_PREEMPTED, stderr.decode()[-2000:]
    stopped = json.loads((tmp_path / "0" / "metrics.json").read_text())
    assert stopped["status"] == "preempted" and not (tmp_path / "1").exists()  # the sweep did not go on
    hold.unlink()  # the resumed jobs train straight through
    resumed = subprocess.run(args + ["sweep.resume=true"], cwd=REPO, capture_output=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    first = json.loads((tmp_path / "0" / "metrics.json").read_text())
    assert first["status"] == "ok" and first["steps"] == RESUMABLE_TOTAL
    assert any(f"at step {stopped['steps']} " in w for w in first["warnings"])
    assert json.loads((tmp_path / "1" / "metrics.json").read_text())["status"] == "ok"


def test_a_stop_signal_reaches_every_ddp_rank_and_the_resume_continues_on_every_rank(tmp_path):
    """launcher=ddp, 2 CPU processes (gloo). SIGTERM to the Hydra process (what Slurm sends): the elastic
    agent passes it to the ranks, which agree at the next step the host syncs at (here the evaluation at
    step 7, as the measurement window never fills), checkpoint there and exit 75. The resume continues
    to step 14 on both ranks from rank 0's checkpoint, which holds every rank's RNG states."""
    from conftest import make_settings
    from fastpipe.launch.launcher import launch

    hold = tmp_path.parent / f"{tmp_path.name}.hold"  # both ranks wait in step 7 until the signal reaches them
    hold.touch()
    ddp = ["launcher=ddp", "launcher.nproc_per_node=2", "train.batch_size=8",  # 9 steps/epoch/rank
           "measure.window=500", "train.eval_every=7", "model._target_=fault_models.Held", f"+model.hold={hold}"]
    process = start_run(tmp_path, ddp)
    wait_for(tmp_path / "checkpoints" / "step-00000003.json", process)  # training is under way
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == EXIT_PREEMPTED == 75, stderr.decode()[-3000:]
    stopped = json.loads((tmp_path / "metrics.json").read_text())
    assert stopped["status"] == "preempted" and "stopped by SIGTERM at step 7" in stopped["reason"], stopped["reason"]
    assert stopped["checkpoint"] == str(tmp_path / "checkpoints" / "step-00000007.pt")
    assert verify(Path(stopped["checkpoint"])) is None
    state = torch.load(stopped["checkpoint"], weights_only=True)
    assert len(state["rng"]) == 2 and state["meta"]["world_size"] == 2  # every rank's RNG states
    assert not torch.equal(state["rng"][0]["torch"], state["rng"][1]["torch"])
    hold.unlink()  # the same command again, with train.resume=auto
    resumed = launch(make_settings(RESUMABLE + ddp + [f"train.max_steps={RESUMABLE_TOTAL}", "train.resume=auto"]),
                     tmp_path)
    assert resumed["status"] == "ok" and resumed["steps"] == RESUMABLE_TOTAL and resumed["env"]["world_size"] == 2
    assert any("resuming from" in w and "at step 7 (epoch 1, step 7 of 9)" in w for w in resumed["warnings"])
    assert resumed["accuracy"] is not None and resumed["nonfinite_steps"] == 0
    final = torch.load(tmp_path / "checkpoints" / "step-00000014.pt", weights_only=True)
    assert final["position"]["step"] == RESUMABLE_TOTAL and final["position"]["epoch"] == 1
