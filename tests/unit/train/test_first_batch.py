"""A project's parts that do not fit together: one line naming the part at fault and the fix, before
training where a first batch of each split shows it (docs/errors/project.md)."""
from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
from conftest import run_in_process

from fastpipe.errors import ProjectError, TrainingError
from fastpipe.record.results import read as read_metrics

# the configs name the parts of tests/support/bad_project.py by _target_ (tests/support is on the path)
BASE = ["train.batch_size=8", "train.max_steps=4", "measure.warmup_steps=1", "measure.window=2",
        "runtime.progress=false", "data.num_workers=0"]
CONFIGS = {  # the project's conf/: group/name -> the config's lines
    "dataset/tab": "_target_: bad_project.Tabular", "dataset/ragged": "_target_: bad_project.Ragged",
    "dataset/mismatched": "_target_: bad_project.mismatched_splits",
    "dataset/tab_collate": "_target_: bad_project.Tabular\ncollate_fn:\n  _target_: bad_project.collate_in_workers\n"
                           "  _partial_: true",
    "dataset/tokens300": "_target_: bad_project.Tokens\nvocab: 300",
    "dataset/undeclared300": "_target_: bad_project.Tokens\nvocab: 300\ndeclares: false",
    "model/linear": "_target_: bad_project.Linear", "task/f1": "_target_: bad_project.F1Task",
    "task/nan_accuracy": "_target_: bad_project.NaNAccuracy",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """The overrides that add the project's conf/ to Hydra's search path."""
    conf = tmp_path_factory.mktemp("conf")
    for name, text in CONFIGS.items():
        (conf / f"{name}.yaml").parent.mkdir(parents=True, exist_ok=True)
        (conf / f"{name}.yaml").write_text(text + "\n")
    return BASE + [f"hydra.searchpath=[file://{conf}]"]


def refused(run_dir: Path, overrides: list, error=ProjectError) -> str:
    """The run's one-line reason, after checking it failed before its first step, its DataLoader workers
    (started early, while the run set up) already ended though its traceback still holds them."""
    before = set(multiprocessing.active_children())
    with pytest.raises(error) as raised:
        run_in_process(run_dir, overrides)
    assert raised.tb is not None and set(multiprocessing.active_children()) <= before
    record = read_metrics(run_dir)
    assert record["status"] == "failed" and "\n" not in record["reason"]
    return record["reason"]


@pytest.mark.parametrize("returns, shown", [("tuple", "(float32[8, 2], float32[8, 4])"),
                                            ("dict", "{logits: float32[8, 2]}")])
def test_a_model_returning_a_tuple_or_dict_under_classification(project, tmp_path, returns, shown):
    reason = refused(tmp_path, project + ["dataset=tab", "model=linear", f"+model.returns={returns}"])
    assert reason == (f"model=linear gives what task=classification cannot take on dataset=tab's training split: "
                      f"the model returns {shown}, but the task takes one tensor of class logits [N, C]; return the "
                      "logits alone from forward() (or use a task whose loss takes that output)")
    assert read_metrics(tmp_path)["steps"] is None  # before the first step


def test_samples_that_differ_in_shape_name_the_dataset_split_and_samples(project, tmp_path):
    reason = refused(tmp_path, project + ["dataset=ragged", "model=linear"])
    assert reason == ("dataset=ragged's training split gives samples of different shapes, which torch's default "
                      "collate cannot stack into a batch: sample 0 is (float32[4], int), sample 1 is (float32[5], int); "
                      "give every sample one shape (resize, crop or pad in the dataset), or set dataset.collate_fn to "
                      "a function that pads them")


def test_a_collate_fn_failing_in_a_dataloader_worker_keeps_its_own_message(project, tmp_path):
    """It collates the first batch in the training process, then fails in a worker: the reason is its
    own message (torch's says only "Caught ValueError in DataLoader worker process 0"), the worker's
    traceback is in metrics.json."""
    reason = refused(tmp_path, project + ["dataset=tab_collate", "model=linear", "data.num_workers=1"])
    assert reason == ("dataset.collate_fn=bad_project.collate_in_workers failed on a batch of 8 samples of "
                      "dataset=tab_collate's training split: ValueError: cannot pad these samples (bad_project's own "
                      "message); fix the collate_fn (it takes a list of (input, target) samples and returns the "
                      "batch's (inputs, targets))")
    assert "Original Traceback" in read_metrics(tmp_path)["traceback"]


@pytest.mark.parametrize("dataset, expected", [
    ("tokens300", "dataset=tokens300 has a vocabulary of 300 tokens, but model=gpt_tiny's is 100 "
                  "(model.vocab_size=100); raise model.vocab_size to 300 or more, or leave it unset so that the model "
                  "takes the dataset's"),
    ("undeclared300", "dataset=undeclared300's training split holds token id 299, but model=gpt_tiny's vocabulary "
                      "has 100 entries (ids 0..99); raise model.vocab_size to 300 or more, or leave it unset so that "
                      "the model takes the dataset's vocab_size")])
def test_a_gpt_whose_vocabulary_is_smaller_than_the_datas(project, tmp_path, dataset, expected):
    assert refused(tmp_path, project + [f"dataset={dataset}", "model=gpt_tiny", "task=lm", "model.vocab_size=100",
                                        "model.n_layer=1"]) == expected


def test_held_out_samples_of_another_feature_size_fail_before_training(project, tmp_path):
    """Without the check the run trains a whole epoch, then fails in its first evaluation."""
    reason = refused(tmp_path, project + ["dataset=mismatched", "model=linear", "train.max_steps=null"])
    assert reason == ("model=linear runs on dataset=mismatched's training split but fails on its held-out split "
                      "(RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x5 and 4x2)): a batch of held-out "
                      "inputs is float32[8, 5], of training inputs float32[8, 4]; give both splits samples of the "
                      "same shape (the dataset's 'val' split)")
    assert read_metrics(tmp_path)["steps"] is None


def test_task_lm_on_a_dataset_that_is_not_token_sequences(project, tmp_path):
    reason = refused(tmp_path, project + ["dataset=tab", "model=linear", "task=lm"])
    assert reason.startswith("task=lm cannot train on dataset=tab's training split: its targets are int64[8], but "
                             "the task trains on token sequences: integer token ids [B, T], the inputs shifted by one; "
                             "choose a token dataset (e.g. dataset=tokens)")


def test_a_primary_metric_that_metrics_never_gives(project, tmp_path):
    reason = refused(tmp_path, project + ["dataset=tab", "model=linear", "task=f1"])
    assert reason == ("task=f1's primary metric 'f1' is not among what its metrics() gives (accuracy) on the first "
                      "batch of dataset=tab's held-out split; return 'f1' from metrics() (a per-batch sum), or set "
                      "primary to one of those names")


def test_a_nan_primary_metric_fails_a_run_with_a_held_out_split_only(project, tmp_path):
    reason = refused(tmp_path / "held", project + ["dataset=tab", "model=linear", "task=nan_accuracy"], TrainingError)
    assert reason.startswith("task=nan_accuracy's primary metric accuracy is nan on the held-out split after step 4: "
                             "the run has no result;")
    assert (tmp_path / "held" / "checkpoints" / "last.pt").is_file()  # the weights are kept
    synthetic = run_in_process(tmp_path / "synthetic", project + [
        "dataset=synthetic", "dataset.image_size=16", "dataset.num_classes=2", "dataset.num_images=64",
        "task=nan_accuracy"])  # nothing held out: no metric to judge, the run stands
    assert synthetic["status"] == "ok" and synthetic["primary_metric"] is None
