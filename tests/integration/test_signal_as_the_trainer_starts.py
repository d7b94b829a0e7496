"""A stop signal in the start-up phase that needs real processes: a job with a fresh training process
(``launcher.fresh_process=true``, as each sweep job has), its launching process signalled the moment the
trainer started, before it forwards signals to it, while the trainer still imports, before its own
handlers are set (the signal waits, blocked, and is forwarded). It ends
preempted, exit 75, with what to do next, and nothing trains. The phase signals itself
(tests/support/signal_at.py): by phase, not by timing. The other phases: tests/unit/job/test_start_up_signals.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import HERE_TESTS, REPO

from fastpipe.errors import EXIT_PREEMPTED

RUN = ["dataset.num_images=200", "dataset.image_size=16", "train.max_steps=2", "runtime.progress=false",
       "data.num_workers=0", "launcher.fresh_process=true"]


@pytest.mark.slow
def test_a_stop_signal_as_the_training_process_starts_is_preempted(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(HERE_TESTS / "signal_at.py"), "spawn", "TERM", *RUN, f"hydra.run.dir={tmp_path}"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == EXIT_PREEMPTED, proc.stderr[-2000:]
    reason = ("stopped by SIGTERM while starting up, before training began: nothing to checkpoint; run the same "
              "command again")
    assert proc.stderr.strip().splitlines()[-1] == f"fastpipe: error: {reason}" and "Traceback" not in proc.stderr
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["status"] == "preempted" and record["reason"] == reason
    assert not (tmp_path / "graph.txt").exists()  # nothing was built, nothing trained
