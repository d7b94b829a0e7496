"""The model back in your code: fastpipe.load and python -m fastpipe.evaluate."""
from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from conftest import RESUMABLE, compose, run_in_process


# ------------------------------------------------------------------ the model back in your code
def test_load_gives_the_trained_model_and_evaluate_reproduces_its_metrics(tmp_path):
    import fastpipe
    from fastpipe.cli.evaluate import main as evaluate_main

    overrides = RESUMABLE + ["train.max_steps=9", "train.checkpoint_every=0"]
    m = run_in_process(tmp_path, overrides)
    (tmp_path / ".hydra").mkdir()  # what python -m fastpipe writes beside the run (run_in_process does not)
    OmegaConf.save(compose(overrides), tmp_path / ".hydra" / "config.yaml")
    last = fastpipe.load(tmp_path, "last")
    assert last.step == 9 and last.weights == "raw" and not last.model.training
    saved = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(v, saved[k]) for k, v in last.model.state_dict().items())
    assert type(last.config).__name__ == "Config" and last.config.model.target == "fastpipe.models.TinyCNN"
    assert evaluate_main([str(tmp_path), "--weights", "last"]) == 0
    got = json.loads((tmp_path / "eval.json").read_text())
    assert got["metrics"]["accuracy"] == pytest.approx(m["val_metrics"]["accuracy"])
    assert got["metrics"]["loss"] == pytest.approx(m["val_metrics"]["loss"], rel=1e-5)
    best = fastpipe.load(tmp_path)  # which="best": the best evaluation's weights
    assert best.step == m["best"]["step"]
    (tmp_path / "checkpoints" / "last.json").unlink()  # its sidecar gone: nothing vouches for the file
    from fastpipe.errors import DataError

    with pytest.raises(DataError, match=r"last.pt cannot be trusted: no sidecar .json \(removed, or an older "
                                        r"fastpipe's interrupted write\); load the other weights"):
        fastpipe.load(tmp_path, "last")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_load_on_cuda_without_cuda_is_fastpipes_one_line(tmp_path):
    import fastpipe
    from fastpipe.errors import EnvironmentProblem

    with pytest.raises(EnvironmentProblem, match="device=cuda was asked for but CUDA is not available"):
        fastpipe.load(tmp_path, device="cuda")  # refused before anything is read
