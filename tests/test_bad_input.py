"""The bad-input catalogue (docs/errors.md), one test per row: each input and exactly what the user sees.

Most rows fail while composing or building (in-process, fast); one CLI run checks the exit code and
the single ``fastpipe: error:`` line of a failure inside the training process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import CONF_DIR, REPO, compose, make_settings, run_cli, run_in_process, without_shapes
from fastpipe.errors import (EXIT_CODE, ConfigError, DataError, EnvironmentProblem, OutOfMemory,
                             TrainingError)
from fastpipe.record.results import read as read_metrics

HERE = Path(__file__).resolve().parent
RUN = ["dataset.num_images=200", "dataset.image_size=16", "train.batch_size=16", "train.max_steps=4",
       "measure.warmup_steps=2", "measure.window=3", "runtime.progress=false", "data.num_workers=0"]
LOADER_FREE = [o for o in RUN if not o.startswith("data.")]  # for data=mmap/dali (their own keys)


def message(excinfo) -> str:
    """An exception's text with its causes (Hydra wraps OmegaConf's message)."""
    exc, parts = excinfo.value, []
    while exc is not None:
        parts.append(str(exc))
        exc = exc.__cause__
    return "\n".join(parts)


def image_folder(root: Path, per_class: int = 10) -> Path:
    rng = np.random.default_rng(0)
    for name in ("cats", "dogs"):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(root / name / f"{i}.png")
    return root


# ---------------------------------------------------------------- configuration
def test_unknown_choice():
    with pytest.raises(Exception) as excinfo:
        compose(["precision=fp64"])
    assert "Could not find 'precision/fp64'" in message(excinfo) and "fp32" in message(excinfo)


def test_value_of_the_wrong_type():
    with pytest.raises(Exception) as excinfo:
        compose(["train.epochs=abc"])
    assert "Value 'abc' of type 'str' could not be converted to Integer" in message(excinfo)


def test_a_value_fastpipe_refuses_stops_a_sweep_before_any_job_runs(tmp_path):
    """train.batch_size takes an integer or auto, which Hydra's types cannot say: fastpipe checks every
    job of the grid (command-line lists and a preset's params) before the first one starts."""
    proc = run_cli(["-m", "train.batch_size=16,abc", "train.max_steps=1", f"hydra.sweep.dir={tmp_path}"])
    assert proc.returncode == EXIT_CODE
    assert proc.stderr.strip().splitlines()[-1] == (
        "fastpipe: error: job 1 of the sweep (train.batch_size=abc train.max_steps=1): train.batch_size='abc' is "
        "not valid; use 'auto' or an integer >= 1; nothing was run")
    assert not list(tmp_path.rglob("metrics.json"))


def test_unknown_key():
    with pytest.raises(ConfigError, match=r"^data.no_such_key is not a key of DefaultLoaderConfig \(its keys: "
                                          r"drop_last, name, num_workers, .*\); fix the spelling$"):
        make_settings(["data.no_such_key=1"])


def test_model_that_does_not_import():
    with pytest.raises(ConfigError, match=r"model._target_='nosuchpkg.Net' cannot be imported .*PYTHONPATH"):
        run_in_process("/nonexistent-never-written", RUN + ["model._target_=nosuchpkg.Net"])


def test_resume_path_that_does_not_exist(tmp_path):
    with pytest.raises(ConfigError, match=r"train.resume='/no/such.pt': no such file or folder; use train.resume=auto"):
        run_in_process(tmp_path, RUN + ["train.resume=/no/such.pt"])


def test_checkpoints_of_an_earlier_run_without_resume(tmp_path):
    from fastpipe.checkpoint.files import write_checkpoint

    write_checkpoint(tmp_path / "checkpoints", {"position": {"step": 3}})
    with pytest.raises(ConfigError, match="holds checkpoints of an earlier run: add train.resume=auto"):
        run_in_process(tmp_path, RUN)


# ---------------------------------------------------------------- data
def test_imagefolder_without_root():
    with pytest.raises(ConfigError, match="dataset=imagefolder needs a folder: add dataset.root="):
        make_settings(["dataset=imagefolder"])


def test_missing_dataset_folder(tmp_path):
    with pytest.raises(DataError, match=f"dataset folder {tmp_path / 'nope'} does not exist"):
        run_in_process(tmp_path, without_shapes(RUN) + ["dataset=imagefolder", f"dataset.root={tmp_path / 'nope'}"])


def test_empty_dataset_folder(tmp_path):
    (tmp_path / "data" / "cats").mkdir(parents=True)
    with pytest.raises(DataError, match=r"holds no images; expected .*/<class>/<image>"):
        run_in_process(tmp_path / "run", without_shapes(RUN) + ["dataset=imagefolder", f"dataset.root={tmp_path / 'data'}"])


@pytest.mark.parametrize("workers", [0, 1])
def test_unreadable_image_fails_naming_the_file(tmp_path, workers):
    """A file whose header reads but whose pixels are cut off fails at its batch: one line, also when
    a DataLoader worker raised it (its traceback is left out). A file whose header is unreadable is
    caught before training (tests/test_data_faults.py)."""
    root = image_folder(tmp_path / "data")
    bad = root / "cats" / "broken.png"
    good = (root / "cats" / "0.png").read_bytes()
    bad.write_bytes(good[: len(good) // 3])  # the PNG header intact, most of its data gone
    with pytest.raises(DataError):
        run_in_process(tmp_path / "run", without_shapes(RUN) + [
            "dataset=imagefolder", f"dataset.root={root}", "train.batch_size=4", "train.max_steps=40",
            "dataset.val_fraction=0.3", f"data.num_workers={workers}"])
    reason = read_metrics(tmp_path / "run")["reason"]
    assert reason.startswith(f"cannot read image {bad}: ") and "\n" not in reason
    assert reason.endswith("remove or replace the file")


@pytest.mark.slow
def test_missing_pack(tmp_path):
    with pytest.raises(DataError, match=r"pack .*none.fppack does not exist; create it with `python -m fastpipe.pack"):
        run_in_process(tmp_path, LOADER_FREE + ["data=mmap", f"data.path={tmp_path / 'none.fppack'}"])


def test_truncated_pack(tmp_path):
    from fastpipe.cli import pack

    path = tmp_path / "shapes.fppack"
    assert pack.main(["shapes", str(path), "dataset.num_images=200", "dataset.image_size=16"]) == 0
    path.write_bytes(path.read_bytes()[:-1000])
    with pytest.raises(DataError, match=r"shapes.fppack is truncated"):
        run_in_process(tmp_path / "run", LOADER_FREE + ["data=mmap", f"data.path={path}"])


def test_dali_missing(tmp_path, monkeypatch):
    if not (CONF_DIR / "data" / "dali.yaml").is_file():
        pytest.skip("data=dali is not in this checkout")
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # `import nvidia.dali` now raises ImportError
    with pytest.raises(EnvironmentProblem, match=r'data=dali needs NVIDIA DALI.*pip install "fastpipe\[dali\]"'):
        run_in_process(tmp_path, LOADER_FREE + ["data=dali"])


def test_batch_larger_than_the_training_split(tmp_path):
    with pytest.raises(DataError, match=r"training samples give no full batch of 1000 per process over 1 process\(es\); lower train.batch_size"):
        run_in_process(tmp_path, RUN + ["train.batch_size=1000"])


def test_grad_accum_exceeding_the_batches_of_an_epoch(tmp_path):
    with pytest.raises(ConfigError, match=r"train.grad_accum=50 exceeds the \d+ batches of an epoch"):
        run_in_process(tmp_path, RUN + ["train.grad_accum=50"])


# ---------------------------------------------------------------- machine and training
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_requested_but_absent(tmp_path):
    with pytest.raises(EnvironmentProblem, match="device=cuda was asked for but CUDA is not available"):
        run_in_process(tmp_path, RUN + ["device=cuda"])


def test_compile_failure_falls_back_to_eager(tmp_path):
    metrics = run_in_process(tmp_path, RUN + ["compile=default", "compile.backend=no_such_backend"])
    assert metrics["status"] == "ok" and metrics["steps"] == 4
    assert metrics["compile_fallback"].startswith("InvalidBackend: Invalid backend: 'no_such_backend'")
    assert any("compile=default failed, continuing eager" in w for w in metrics["warnings"])


def test_nonfinite_loss(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    with pytest.raises(TrainingError, match=r"non-finite for \d+ steps in a row .* lower optimizer.lr"):
        run_in_process(tmp_path, RUN + ["model._target_=fault_models.NaNAfter", "+model.after=0",
                                        "train.max_nonfinite_steps=2", "train.max_steps=8"])
    assert read_metrics(tmp_path)["nonfinite_steps"] >= 2


def test_out_of_memory_names_the_fixes(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
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


@pytest.mark.slow
def test_cli_failure_in_the_training_process_is_one_line_and_exit_2(tmp_path):
    """A fresh training process: its failure comes back as exit code 2 and one line, no traceback."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(REPO)]))
    proc = subprocess.run([sys.executable, "-m", "fastpipe", *RUN, "model._target_=fault_models.OutOfMemoryNet",
                           f"hydra.run.dir={tmp_path}"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == EXIT_CODE == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("fastpipe: error: ")]
    assert len(errors) == 1 and "out of memory with train.batch_size=16" in errors[0]
    assert "Traceback" not in proc.stderr
    assert json.loads((tmp_path / "metrics.json").read_text())["status"] == "failed"
