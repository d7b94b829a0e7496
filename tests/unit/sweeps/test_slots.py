"""hydra/launcher=gpus: slots of GPUs and cores, the visible GPUs, the task found again in a fresh process."""
from __future__ import annotations

import pytest

from fastpipe.errors import ConfigError
from fastpipe.sweeps.slots import Slot, plan_slots, split_cores


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
