"""Whole runs: the artefacts and metrics users rely on, learning, amp/compile, the clear errors."""
from __future__ import annotations

import json
import math
import shutil

import pytest

from conftest import REPO, TINY, make_settings, run_cli, run_in_process, without_shapes
from fastpipe.errors import EXIT_CODE


@pytest.mark.slow
def test_cli_run_writes_every_artefact_and_metric(tmp_path):
    proc = run_cli(TINY + [f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "fastpipe training graph" in proc.stdout and "fastpipe run summary" in proc.stdout
    for name in (".hydra/config.yaml", ".hydra/overrides.yaml", "graph.txt", "metrics.json", "loss.png"):
        assert (tmp_path / name).is_file(), name
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
    m = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("status", "choices", "throughput", "step_time_ms", "epoch_time_s", "warmup_s", "data_wait_frac",
                "peak_mem_gb", "gpu_util", "final_loss", "accuracy", "env", "warnings"):
        assert key in m, key
    assert m["status"] == "ok" and m["warnings"] == []
    assert m["choices"] == {"data": "default", "precision": "fp32", "compile": "off", "launcher": "single",
                            "model": "tiny_cnn", "dataset": "shapes", "profile": "off", "task": "classification",
                            "optimizer": "adamw", "lr_schedule": "cosine", "logger": "tensorboard"}
    assert m["throughput"] > 0 and m["warmup_s"] > 0 and m["epoch_time_s"] > 0
    assert 0 < m["step_time_ms"]["median"] <= m["step_time_ms"]["p90"]
    assert 0 <= m["data_wait_frac"] < 1 and m["peak_mem_gb"] > 0 and m["gpu_util"] is None
    assert math.isfinite(m["final_loss"]) and 0 <= m["accuracy"] <= 1
    assert m["steps"] == 12 and m["measured_steps"] == 10
    assert m["env"]["world_size"] == 1 and m["env"]["device"] == "cpu" and m["env"]["torch"]


def test_short_run_learns(tmp_path):
    m = run_in_process(tmp_path, ["dataset.num_images=800", "dataset.image_size=24", "train.epochs=4",
                                  "train.batch_size=32", "runtime.progress=false", "data.num_workers=0"])
    assert m["status"] == "ok" and m["accuracy"] >= 0.7, m["accuracy"]  # chance is 0.25


@pytest.mark.slow
def test_default_run_reaches_ninety_percent(tmp_path):
    """The README's promise: `python -m fastpipe` with no overrides reaches >= 0.90 held-out accuracy."""
    proc = run_cli([f"hydra.run.dir={tmp_path}", "runtime.progress=false"], timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["accuracy"] >= 0.90, m["accuracy"]


@pytest.mark.parametrize("overrides", [["precision=amp"], pytest.param(["compile=default"], marks=pytest.mark.slow),
                                       pytest.param(["precision=amp", "compile=default"], marks=pytest.mark.slow)])
def test_amp_and_compile_train_with_finite_loss(tmp_path, overrides):
    m = run_in_process(tmp_path, TINY + overrides)
    assert m["status"] == "ok" and math.isfinite(m["final_loss"]) and m["compile_fallback"] is None
    assert "bf16 autocast" in (tmp_path / "graph.txt").read_text() or "precision=amp" not in overrides


def test_compile_failure_falls_back_to_eager_and_keeps_training(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "tests"))
    m = run_in_process(tmp_path, TINY + ["compile=default", "compile.fullgraph=true",
                                         "model._target_=helper_models.GraphBreakCNN"])
    assert m["status"] == "ok" and m["steps"] == 12 and math.isfinite(m["final_loss"])
    assert m["compile_fallback"] and any("continuing eager" in w for w in m["warnings"])
    assert "FELL BACK TO EAGER" in (tmp_path / "graph.txt").read_text()


def test_shapes_dataset_is_byte_identical_for_the_same_settings(tmp_path):
    from fastpipe.data import shapes

    a = shapes.generate(tmp_path / "a", 4, 24, (20, 20), seed=3)
    b = shapes.generate(tmp_path / "b", 4, 24, (20, 20), seed=3)
    c = shapes.generate(tmp_path / "c", 4, 24, (20, 20), seed=4)
    d = shapes.generate(tmp_path / "d", 4, 24, (20, 20), seed=3, threads=3)  # any number of threads
    files = sorted(p.relative_to(a) for p in a.rglob("*.jpg"))
    assert len(files) == 24 and sorted(p.relative_to(d) for p in d.rglob("*.jpg")) == files
    assert all((a / f).read_bytes() == (b / f).read_bytes() == (d / f).read_bytes() for f in files)
    assert any((a / f).read_bytes() != (c / f).read_bytes() for f in files)


@pytest.mark.slow
def test_imagefolder_trains_to_high_accuracy(tmp_path):
    from fastpipe.data import shapes

    root = shapes.generate(tmp_path / "images", 4, 600, (40, 40), seed=11)  # a real folder of JPEGs
    m = run_in_process(tmp_path / "run", ["dataset=imagefolder", f"dataset.root={root}", "dataset.image_size=32",
                                          "dataset.augment=false", "train.epochs=4", "train.batch_size=32",
                                          "runtime.progress=false", "data.num_workers=0"])
    assert m["status"] == "ok" and m["accuracy"] >= 0.8 and m["choices"]["dataset"] == "imagefolder"


def test_val_folder_is_the_held_out_split(tmp_path):
    from fastpipe.data.images import scan_image_folder
    from fastpipe.data import shapes

    src = shapes.generate(tmp_path / "src", 2, 40, (16, 16), seed=0)
    for split in ("train", "val"):
        shutil.copytree(src, tmp_path / "split" / split)
    classes, tr, _, va, _ = scan_image_folder(tmp_path / "split", 0.2)
    assert classes == ["circle", "square"] and len(tr) == len(va) == 40
    assert all("/val/" in f for f in va)


def test_held_out_split_is_deterministic_and_disjoint(tmp_path):
    from fastpipe.data.images import scan_image_folder
    from fastpipe.data import shapes

    root = shapes.generate(tmp_path / "d", 4, 200, (16, 16), seed=0)
    first = scan_image_folder(root, 0.25)
    again = scan_image_folder(root, 0.25)
    assert first == again and not set(first[1]) & set(first[3])
    assert 0.15 < len(first[3]) / 200 < 0.35


def test_synthetic_reports_null_accuracy(tmp_path):
    m = run_in_process(tmp_path, without_shapes(TINY) + ["dataset=synthetic", "dataset.num_images=64",
                                                         "dataset.image_size=16", "dataset.num_classes=10"])
    assert m["status"] == "ok" and m["accuracy"] is None and m["throughput"] > 0


@pytest.mark.parametrize("overrides,message", [
    (["dataset=imagefolder"], "dataset=imagefolder needs a folder: add dataset.root="),
    (["dataset=imagefolder", "dataset.root=/nonexistent/images"], "dataset folder /nonexistent/images does not exist"),
    (["device=cuda"], "device=cuda was asked for but CUDA is not available"),
    (["model._target_=nosuchpkg.Net"], "model._target_='nosuchpkg.Net' cannot be imported"),
])
@pytest.mark.slow
def test_bad_input_exits_with_one_clear_line(tmp_path, overrides, message):
    proc = run_cli((without_shapes(TINY) if "dataset=imagefolder" in overrides else TINY) + overrides
                   + [f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == EXIT_CODE
    assert "fastpipe: error: " in proc.stderr and message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert json.loads((tmp_path / "metrics.json").read_text())["status"] == "failed"


def test_empty_dataset_folder_is_a_clear_error(tmp_path):
    (tmp_path / "empty" / "cats").mkdir(parents=True)
    from fastpipe.errors import DataError

    with pytest.raises(DataError, match="holds no images"):
        run_in_process(tmp_path / "run", without_shapes(TINY) + ["dataset=imagefolder", f"dataset.root={tmp_path / 'empty'}"])
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["reason"].startswith("dataset folder")


def test_cuda_alloc_conf_is_exported_before_cuda(monkeypatch):
    import os

    from fastpipe.runtime import setup_runtime

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    setup_runtime(make_settings(["runtime.cuda_alloc_conf=expandable_segments:True"]))
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
