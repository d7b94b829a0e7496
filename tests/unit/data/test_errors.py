"""The bad-input catalogue (docs/errors/data.md), the rows about data: each input and exactly what the user sees."""
from __future__ import annotations

import json
import multiprocessing
import sys
from pathlib import Path

import pytest

from fastpipe.errors import DataError, EnvironmentProblem
from fastpipe.record.results import read as read_metrics

from conftest import CONF_DIR, TINY, run_in_process, without_shapes
from png_folders import png_folder


RUN = ["dataset.num_images=200", "dataset.image_size=16", "train.batch_size=16", "train.max_steps=4",
       "measure.warmup_steps=2", "measure.window=3", "runtime.progress=false", "data.num_workers=0"]


LOADER_FREE = [o for o in RUN if not o.startswith("data.")]  # for data=mmap/dali (their own keys)


def image_folder(root: Path) -> Path:
    return png_folder(root)


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
    caught before training (tests/unit/data/test_faults.py)."""
    root = image_folder(tmp_path / "data")
    bad = root / "cats" / "broken.png"
    good = (root / "cats" / "0.png").read_bytes()
    bad.write_bytes(good[: len(good) // 3])  # the PNG header intact, most of its data gone
    before = set(multiprocessing.active_children())
    with pytest.raises(DataError) as raised:
        run_in_process(tmp_path / "run", without_shapes(RUN) + [
            "dataset=imagefolder", f"dataset.root={root}", "train.batch_size=4", "train.max_steps=40",
            "dataset.val_fraction=0.3", f"data.num_workers={workers}"])
    # the failed run ended its DataLoader worker itself, though its traceback (held here) still holds the
    # loader: left to a garbage collection, the worker would never hear the stop and be killed after 5 s
    assert raised.tb is not None and set(multiprocessing.active_children()) <= before
    reason = read_metrics(tmp_path / "run")["reason"]
    assert reason.startswith(f"cannot read image {bad}: ") and "\n" not in reason
    assert reason.endswith("remove or replace the file")


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


def test_empty_dataset_folder_is_a_clear_error(tmp_path):
    (tmp_path / "empty" / "cats").mkdir(parents=True)
    from fastpipe.errors import DataError

    with pytest.raises(DataError, match="holds no images"):
        run_in_process(tmp_path / "run", without_shapes(TINY) + ["dataset=imagefolder", f"dataset.root={tmp_path / 'empty'}"])
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["reason"].startswith("dataset folder")
