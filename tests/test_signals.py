"""Preemption: a real SIGTERM / SIGUSR1 to a real training process checkpoints it and exits 75."""
from __future__ import annotations

import json
import signal

import pytest

from conftest import run_in_process
from fastpipe.checkpoint_files import verify
from fastpipe.errors import EXIT_PREEMPTED
from test_checkpoint import BASE, SLOW, TOTAL, _start, _wait_for


@pytest.mark.parametrize("sig,fresh_process", [(signal.SIGTERM, True), (signal.SIGUSR1, False)])
def test_stop_signal_checkpoints_and_exits_then_resume_completes(sig, fresh_process, tmp_path):
    # checkpoint_every=0: the signal writes a checkpoint even with periodic ones off. With a fresh
    # training process the signal goes to the Hydra process, which forwards it.
    process = _start(tmp_path, [f"launcher.fresh_process={str(fresh_process).lower()}", "train.checkpoint_every=0",
                                *SLOW])
    _wait_for(tmp_path / "tb", process)  # first scalars written: training is under way
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == EXIT_PREEMPTED == 75, stderr.decode()[-2000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    step = metrics["steps"]
    assert metrics["status"] == "preempted" and 2 <= step < TOTAL
    line = f"stopped by {sig.name} at step {step}: checkpoint {tmp_path}/checkpoints/step-{step:08d}.pt written"
    assert line in metrics["reason"] and line in stderr.decode()
    assert f"train.resume=auto hydra.run.dir={tmp_path}" in metrics["reason"]
    checkpoint = tmp_path / "checkpoints" / f"step-{step:08d}.pt"
    assert metrics["checkpoint"] == str(checkpoint) and verify(checkpoint) is None
    resumed = run_in_process(tmp_path, BASE + [f"train.max_steps={TOTAL}", "train.resume=auto"])
    assert resumed["status"] == "ok" and resumed["steps"] == TOTAL
    assert any(f"at step {step} " in w for w in resumed["warnings"])
