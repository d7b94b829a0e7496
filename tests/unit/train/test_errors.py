"""The bad-input catalogue (docs/errors/, mostly runs.md), the rows found while building or training: each input and
exactly what the user sees."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fastpipe.errors import ConfigError, EnvironmentProblem, OutOfMemory, TrainingError
from fastpipe.record.results import read as read_metrics

from conftest import RESUMABLE, make_settings, run_in_process


RUN = ["dataset.num_images=200", "dataset.image_size=16", "train.batch_size=16", "train.max_steps=4",
       "measure.warmup_steps=2", "measure.window=3", "runtime.progress=false", "data.num_workers=0"]


def test_model_that_does_not_import():
    with pytest.raises(ConfigError, match=r"model._target_='nosuchpkg.Net' cannot be imported .*PYTHONPATH"):
        run_in_process("/nonexistent-never-written", RUN + ["model._target_=nosuchpkg.Net"])


def test_resume_path_that_does_not_exist(tmp_path):
    with pytest.raises(ConfigError, match=r"train.resume='/no/such.pt': no such file or folder; use train.resume=auto"):
        run_in_process(tmp_path, RUN + ["train.resume=/no/such.pt"])


def test_checkpoints_of_an_earlier_run_without_resume(tmp_path):
    from fastpipe.checkpoint.disk import write_checkpoint

    write_checkpoint(tmp_path / "checkpoints", {"position": {"step": 3}})
    with pytest.raises(ConfigError, match="holds checkpoints of an earlier run: add train.resume=auto"):
        run_in_process(tmp_path, RUN)


def test_grad_accum_exceeding_the_batches_of_an_epoch(tmp_path):
    with pytest.raises(ConfigError, match=r"train.grad_accum=50 exceeds the \d+ batches of an epoch"):
        run_in_process(tmp_path, RUN + ["train.grad_accum=50"])


# ---------------------------------------------------------------- machine and training
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_requested_but_absent(tmp_path):
    with pytest.raises(EnvironmentProblem, match="device=cuda was asked for but CUDA is not available"):
        run_in_process(tmp_path, RUN + ["device=cuda"])


def test_nonfinite_loss(tmp_path):
    with pytest.raises(TrainingError, match=r"non-finite for \d+ steps in a row .* lower optimizer.lr"):
        run_in_process(tmp_path, RUN + ["model._target_=fault_models.NaNAfter", "+model.after=0",
                                        "train.max_nonfinite_steps=2", "train.max_steps=8"])
    assert read_metrics(tmp_path)["nonfinite_steps"] >= 2


def test_out_of_memory_names_the_fixes(tmp_path):
    with pytest.raises(OutOfMemory) as excinfo:
        run_in_process(tmp_path, RUN + ["model._target_=fault_models.OutOfMemoryNet"])
    assert isinstance(excinfo.value.__cause__, torch.OutOfMemoryError)
    reason = read_metrics(tmp_path)["reason"]
    assert reason.startswith("out of memory with train.batch_size=16 (precision=fp32, "
                             "model=fault_models.OutOfMemoryNet, launcher=single)")
    for fix in ("lower train.batch_size", "precision=amp", "model.activation_checkpointing=true", "launcher=fsdp"):
        assert fix in reason
    assert "traceback" not in read_metrics(tmp_path)


def test_out_of_memory_offers_only_the_fixes_not_yet_applied():
    from fastpipe.train.failures import out_of_memory as _out_of_memory

    settings = make_settings(["task=lm", "dataset=tokens", "model=gpt_tiny", "precision=amp",
                              "model.activation_checkpointing=true", "launcher=fsdp", "train.batch_size=1"])
    reason = str(_out_of_memory(settings, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 400 MiB")))
    assert "launcher=fsdp)" in reason and "shard over more GPUs (launcher.nproc_per_node" in reason
    for applied in ("lower train.batch_size", "use precision=amp", "set model.activation_checkpointing"):
        assert applied not in reason
    assert reason.endswith("[CUDA out of memory. Tried to allocate 400 MiB]")


def test_a_bad_optimizer_value_names_the_key(tmp_path):
    from fastpipe.errors import ConfigError

    with pytest.raises(ConfigError, match=r"optimizer._target_='torch.optim.AdamW' failed: ValueError: Invalid "
                                          r"learning rate: -1 \(its keys: optimizer.lr=-1, "):
        run_in_process(tmp_path, RESUMABLE + ["optimizer.lr=-1"])


def test_a_run_whose_every_step_was_non_finite_fails_even_below_the_limit(tmp_path):
    with pytest.raises(TrainingError, match=r"non-finite at every one of the 4 steps this run trained: nothing was learnt"):
        run_in_process(tmp_path, RUN + ["model._target_=fault_models.NaNAfter", "+model.after=0",
                                        "train.max_nonfinite_steps=20", "train.max_steps=4"])
    assert read_metrics(tmp_path)["status"] == "failed"


def test_sigusr2_submitits_time_limit_warning_checkpoints_like_sigterm(tmp_path):
    from fastpipe.errors import Preempted

    with pytest.raises(Preempted, match=r"^stopped by SIGUSR2 at step 4: checkpoint .*step-00000004.pt written"):
        run_in_process(tmp_path, RUN + ["model._target_=fault_models.SignalsAt", "+model.after=3",
                                        "+model.sig=SIGUSR2", "train.max_steps=8"])
    assert read_metrics(tmp_path)["status"] == "preempted"


def test_a_dataloader_workers_death_says_what_its_signal_tells():
    """SIGTERM is sent by a process, never by the out-of-memory killer (SIGKILL): the hint says so."""
    from fastpipe.train.failures import fixable_failure

    settings = make_settings([])

    def line(torch_text):
        return str(fixable_failure(settings, RuntimeError(torch_text), Path(".")))

    term = line("DataLoader worker (pid 4242) is killed by signal: Terminated. ")
    assert term.startswith("a DataLoader worker process died (DataLoader worker (pid 4242) is killed by signal: "
                           "Terminated.); it was ended by SIGTERM, which another process sent")
    assert "not the out-of-memory killer (it sends SIGKILL)" in term and "lower data.num_workers" not in term
    kill = line("DataLoader worker (pid 4242) is killed by signal: Killed. ")
    assert "SIGKILL: the out-of-memory killer, most often" in kill and "lower data.num_workers" in kill
    assert "/dev/shm" in line("DataLoader worker (pid 4242) is killed by signal: Bus error. ")
    assert "the out-of-memory killer is the usual cause" in line("DataLoader worker (pid(s) 4242) exited unexpectedly")
