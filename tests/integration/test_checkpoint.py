"""Checkpoints under real failures: SIGKILL while training or while writing, then a resume that equals
the uninterrupted run; resume on every DDP rank."""
from __future__ import annotations

import signal

import torch

from conftest import RESUMABLE, RESUMABLE_TOTAL, SLOW_MODEL, assert_same_run, run_in_process, start_run, wait_for


def test_sigkill_while_training_then_resume_completes(straight, tmp_path):
    _, reference = straight
    process = start_run(tmp_path, ["launcher.fresh_process=false", *SLOW_MODEL])
    wait_for(tmp_path / "checkpoints" / "step-00000006.json", process)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    resumed = run_in_process(tmp_path, RESUMABLE + [f"train.max_steps={RESUMABLE_TOTAL}", "train.resume=auto"])
    assert any("resuming from" in w for w in resumed["warnings"])
    assert_same_run(resumed, reference)


# Runs fastpipe with the checkpoint write paused between fsync and rename at step 6.
KILL_IN_WRITE = """
import pathlib, sys, time
import fastpipe.checkpoint.files as files
def pause(tmp):
    if "step-00000006" in tmp.name:
        (tmp.parent.parent / "writing").write_text(tmp.name)
        time.sleep(120)
files._before_publish = pause
from fastpipe.__main__ import main
main()
"""


def test_sigkill_while_writing_a_checkpoint_never_loads_the_partial_one(straight, tmp_path):
    _, reference = straight
    process = start_run(tmp_path, ["launcher.fresh_process=false"], code=KILL_IN_WRITE)
    wait_for(tmp_path / "writing", process)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    folder = tmp_path / "checkpoints"
    assert (folder / (tmp_path / "writing").read_text()).is_file()  # the complete-looking temporary file
    assert not (folder / "step-00000006.pt").exists()
    resumed = run_in_process(tmp_path, RESUMABLE + [f"train.max_steps={RESUMABLE_TOTAL}", "train.resume=auto"])
    assert any("step-00000003.pt at step 3" in w for w in resumed["warnings"])
    assert not list(folder.glob(".step-*"))  # the interrupted write was cleaned up
    assert_same_run(resumed, reference)


def test_ddp_resume_continues_on_every_rank(tmp_path):
    """launcher=ddp, 2 CPU processes (gloo): stop at step 7, resume to 14 from rank 0's checkpoint."""
    from conftest import make_settings
    from fastpipe.launch.launcher import launch

    ddp = RESUMABLE + ["launcher=ddp", "launcher.nproc_per_node=2", "train.batch_size=8"]  # 9 steps/epoch/rank
    first = launch(make_settings(ddp + ["train.max_steps=7"]), tmp_path)
    assert first["status"] == "ok" and first["steps"] == 7 and first["env"]["world_size"] == 2
    state = torch.load(tmp_path / "checkpoints" / "step-00000007.pt", weights_only=True)
    assert len(state["rng"]) == 2 and state["meta"]["world_size"] == 2  # every rank's RNG states
    assert not torch.equal(state["rng"][0]["torch"], state["rng"][1]["torch"])
    resumed = launch(make_settings(ddp + [f"train.max_steps={RESUMABLE_TOTAL}", "train.resume=auto"]), tmp_path)
    assert resumed["status"] == "ok" and resumed["steps"] == RESUMABLE_TOTAL and resumed["env"]["world_size"] == 2
    assert any("resuming from" in w and "at step 7 (epoch 1, step 7 of 9)" in w for w in resumed["warnings"])
    assert resumed["accuracy"] is not None and resumed["nonfinite_steps"] == 0
    final = torch.load(tmp_path / "checkpoints" / "step-00000014.pt", weights_only=True)
    assert final["position"]["step"] == RESUMABLE_TOTAL and final["position"]["epoch"] == 1
