"""The training process started ahead (launch/warm.py): it runs the job it is handed as a spawned one
would, and is not used where the environment changed in a variable read at import."""
from __future__ import annotations

import os
from types import SimpleNamespace

from fastpipe.launch import warm


def test_a_waiting_process_runs_the_job_it_is_handed_with_the_environment_of_the_hand_over(tmp_path, monkeypatch):
    warm.prestart(imports=())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracker")  # a tracker's setting: not read at import
    waiting, why = warm.take()
    assert waiting is not None and why is None and warm.take() == (None, None)  # handed out once
    made = tmp_path / "made" / os.environ["MLFLOW_TRACKING_URI"].replace(":", "").replace("/", "")
    pid = waiting.hand_over(os.makedirs, str(made))
    waiting.process.join(timeout=60)
    assert pid == waiting.process.pid and waiting.process.exitcode == 0 and made.is_dir()


def test_a_process_started_under_another_torch_environment_is_not_used(monkeypatch):
    warm.prestart(imports=())
    monkeypatch.setenv("TORCH_LOGS", "dynamo")  # torch reads it as it imports
    process = warm._ready.process
    why = "TORCH_LOGS changed since it started, and torch reads such variables as it imports"
    assert warm.take() == (None, why) and not process.is_alive()  # dismissed
    warm.prestart(imports=("fastpipe.train.job",))  # seconds of imports: a refused command does not wait for them
    process = warm._ready.process
    warm.dismiss()
    assert not process.is_alive() and process.exitcode in (0, -9)


def test_a_variable_its_own_imports_set_alike_does_not_refuse_it(tmp_path, monkeypatch):
    """The Hydra process imports torch too, and torch's imports set variables of their own
    (TORCHINDUCTOR_CACHE_DIR): the waiting process, whose imports set the same, still runs the job;
    another value refuses it, naming the variable."""
    (tmp_path / "sets_at_import.py").write_text('import os\nos.environ["TORCHINDUCTOR_CACHE_DIR"] = "/tmp/cache-a"\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    for value, why in (("/tmp/cache-a", None), ("/tmp/cache-b", "TORCHINDUCTOR_CACHE_DIR changed since it started, "
                                                                "and torch reads such variables as it imports")):
        warm.prestart(imports=("sets_at_import",))
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", value)  # as this process's own imports would
        waiting, said = warm.take()
        assert said == why and (waiting is None) == (why is not None)
        if waiting is not None:
            waiting.dismiss()
        monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")


def test_a_launcher_no_choice_registers_starts_nothing_and_ends_the_waiting_one():
    """A config naming an unknown launcher: no process waits for a job (to_settings then refuses the name in
    one line), and prestart_for itself raises nothing."""
    from omegaconf import OmegaConf

    warm.prestart(imports=())
    process = warm._ready.process
    warm.prestart_for(OmegaConf.create({"name": "no-such-launcher"}), sweep=False)
    assert warm._ready is None and not process.is_alive()


def test_a_sweep_keeps_the_next_jobs_process_ready_only_for_jobs_that_train_on_a_gpu(monkeypatch):
    """On the CPU a job's training takes every core: the next job's process is not started beside it
    (its imports would take CPU from it, and the last one would run no job)."""
    from omegaconf import OmegaConf

    from fastpipe import machine

    started = []
    monkeypatch.setattr(warm, "prestart", lambda: started.append(1))
    single = OmegaConf.create({"name": "single", "fresh_process": True})
    for device, gpu, ready in (("cpu", True, False), ("cuda", False, True), ("auto", False, False), ("auto", True, True)):
        monkeypatch.setattr(machine, "nvml_gpu_count", lambda: int(gpu))
        monkeypatch.setattr(machine, "sys", SimpleNamespace(modules={}))  # torch not imported: auto asks the driver
        warm.prestart_for(single, sweep=True, device=device)
        assert warm.keep_one_ready is ready, device
    warm.prestart_for(single, sweep=False, device="cuda")  # one run: one process, for this job
    assert warm.keep_one_ready is False and len(started) == 5
    monkeypatch.undo()
    import torch

    assert machine.trains_on_a_gpu("auto") is torch.cuda.is_available()  # torch imported: its answer
