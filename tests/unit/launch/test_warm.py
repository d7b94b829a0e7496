"""The training process started ahead (launch/warm.py): it runs the job it is handed as a spawned one
would, and is not used where the environment changed in a variable read at import."""
from __future__ import annotations

import os

from fastpipe.launch import warm


def test_a_waiting_process_runs_the_job_it_is_handed_with_the_environment_of_the_hand_over(tmp_path, monkeypatch):
    warm.prestart(imports=())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracker")  # a tracker's setting: not read at import
    waiting = warm.take()
    assert waiting is not None and warm.take() is None  # handed out once
    made = tmp_path / "made" / os.environ["MLFLOW_TRACKING_URI"].replace(":", "").replace("/", "")
    pid = waiting.hand_over(os.makedirs, str(made))
    waiting.process.join(timeout=60)
    assert pid == waiting.process.pid and waiting.process.exitcode == 0 and made.is_dir()


def test_a_process_started_under_another_torch_environment_is_not_used(monkeypatch):
    warm.prestart(imports=())
    monkeypatch.setenv("TORCH_LOGS", "dynamo")  # torch reads it as it imports
    process = warm._ready.process
    assert warm.take() is None and not process.is_alive()  # dismissed: ended (or killed while it started)
    warm.prestart(imports=("fastpipe.train.job",))  # seconds of imports: a refused command does not wait for them
    process = warm._ready.process
    warm.dismiss()
    assert not process.is_alive() and process.exitcode in (0, -9)


def test_a_launcher_no_choice_registers_starts_nothing_and_ends_the_waiting_one():
    """A config naming an unknown launcher: no process waits for a job (to_settings then refuses the name in
    one line), and prestart_for itself raises nothing."""
    from omegaconf import OmegaConf

    warm.prestart(imports=())
    process = warm._ready.process
    warm.prestart_for(OmegaConf.create({"name": "no-such-launcher"}), sweep=False)
    assert warm._ready is None and not process.is_alive()
