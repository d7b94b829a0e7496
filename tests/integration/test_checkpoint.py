"""Checkpoints under real failures: SIGKILL while training or while writing, then a resume that equals
the uninterrupted run (a stop signal to a DDP run, then its resume on every rank: test_signals.py)."""
from __future__ import annotations

import signal

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
