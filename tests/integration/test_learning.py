"""Runs long enough to learn, in this process: each loader and dataset kind reaches its accuracy band."""
from __future__ import annotations

import pytest

from conftest import needs_dali, run_in_process



def test_imagefolder_trains_to_high_accuracy(tmp_path):
    from fastpipe.data import shapes

    root = shapes.generate(tmp_path / "images", 4, 600, (40, 40), seed=11)  # a real folder of JPEGs
    m = run_in_process(tmp_path / "run", ["dataset=imagefolder", f"dataset.root={root}", "dataset.image_size=32",
                                          "dataset.augment=false", "train.epochs=4", "train.batch_size=32",
                                          "runtime.progress=false", "data.num_workers=0"])
    assert m["status"] == "ok" and m["accuracy"] >= 0.8 and m["choices"]["dataset"] == "imagefolder"


SHORT = ["dataset.num_images=800", "dataset.image_size=24", "train.epochs=4", "train.batch_size=32",
         "runtime.progress=false"]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """A short data=default run: it learns, and it is the band data=mmap must reach."""
    return run_in_process(tmp_path_factory.mktemp("default"), SHORT + ["data.num_workers=0"])


def test_short_run_learns(default_run):
    assert default_run["status"] == "ok" and default_run["accuracy"] >= 0.7, default_run["accuracy"]  # chance: 0.25


def test_mmap_training_reaches_the_accuracy_band_of_data_default(default_run, tmp_path):
    base = default_run
    mm = run_in_process(tmp_path / "mmap", SHORT + ["data=mmap", "data.num_threads=1"])
    assert mm["status"] == "ok" and mm["choices"]["data"] == "mmap" and mm["steps"] == base["steps"]
    assert mm["accuracy"] >= 0.5 and abs(mm["accuracy"] - base["accuracy"]) <= 0.15, (mm["accuracy"], base["accuracy"])
    assert "data=mmap  pack=" in (tmp_path / "mmap" / "graph.txt").read_text()


@needs_dali
def test_dali_cpu_training_reaches_the_default_loader_band(tmp_path):
    """The README's default run (shapes, tiny_cnn, 3 epochs, seed 0): data=default ends at 93.5 %
    held-out accuracy here (93.7 % with data=dali); the band asserted is >= 85 %."""
    m = run_in_process(tmp_path, ["data=dali", "data.num_threads=1", "runtime.progress=false"])
    assert m["status"] == "ok" and m["choices"]["data"] == "dali"
    assert m["accuracy"] >= 0.85 and m["final_loss"] < 0.5
    assert 0.0 <= m["data_wait_frac"] < 1.0 and m["throughput"] > 0
    assert "data=dali  decode=cpu on CPU" in (tmp_path / "graph.txt").read_text()
