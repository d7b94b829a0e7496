"""What fastpipe.load, python -m fastpipe.evaluate and python -m fastpipe.consolidate say about the
weights they cannot load, or the ones they chose: the reasons that apply to the run as it is, in the
command's own spelling."""
from __future__ import annotations

import os

import pytest
import torch

from fastpipe.checkpoint.trained import load
from fastpipe.errors import DataError
from fastpipe.record import results
from fastpipe.record.run_record import RunRecord
from fastpipe.record.runlock import RunLock


def run_folder(path, status: str):
    path.mkdir(parents=True, exist_ok=True)
    record = RunRecord.start({"model": "tiny_cnn"}, [], run_id="r1").set(status=status)
    results.write(path, record)
    return path


def test_load_on_a_run_still_going_says_so(tmp_path):
    run = run_folder(tmp_path / "run", "running")
    with RunLock(run, "run"):  # the live run holds its folder
        with pytest.raises(DataError) as excinfo:
            load(run)
    text = str(excinfo.value)
    assert text.startswith(f"{run / 'checkpoints' / 'best.pt'} does not exist (the run is still going (pid {os.getpid()}")
    assert text.endswith("best.pt is written at the run's first evaluation with a new best; load it once the run has "
                         "evaluated, or a step-*.pt checkpoint)")
    assert "held-out" not in text and "save_weights" not in text  # the reasons of a finished run
    with pytest.raises(DataError, match=r"\(the run did not finish \(its process died\): last.pt is written when the "
                                        r"run ends; resume the run with train.resume=auto"):
        load(run, "last")  # the lock went with its process


def test_evaluate_names_its_own_flag(tmp_path, capsys):
    from fastpipe.cli import evaluate

    run = run_folder(tmp_path / "run", "ok")
    assert evaluate.main([str(run)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"fastpipe.evaluate: error: {run / 'checkpoints' / 'best.pt'} does not exist (the run had no held-out split, "
        "or train.save_weights=false; try --weights last)")


def sharded(folder, step: int):
    """A published sharded checkpoint whose train state is real (its shards are not read here)."""
    from fastpipe.checkpoint.dcp import publish

    partial = folder / f".step-{step:08d}.dcp.partial"
    partial.mkdir(parents=True)
    (partial / "__0_0.distcp").write_bytes(os.urandom(100))
    torch.save({"position": {"step": step}, "meta": {}}, partial / "train_state.pt")
    return publish(partial, folder / f"step-{step:08d}.dcp", {"step": step})


def test_consolidate_says_which_step_it_used_past_a_damaged_newest_one(tmp_path, monkeypatch, capsys):
    from fastpipe.checkpoint import dcp
    from fastpipe.cli import consolidate

    older, newest = sharded(tmp_path / "run" / "checkpoints", 4), sharded(tmp_path / "run" / "checkpoints", 8)
    (newest / "__0_0.distcp").write_bytes(os.urandom(100))  # same size, other bytes
    monkeypatch.setattr(dcp, "read_weights", lambda path: {"weight": torch.zeros(2)})  # its shards are stand-ins
    out = tmp_path / "model.pt"
    assert consolidate.main([str(tmp_path / "run"), str(out)]) == 0
    said = capsys.readouterr()
    assert said.err.strip() == (f"fastpipe.consolidate: {newest} is not a complete checkpoint (__0_0.distcp's SHA-256 "
                                "differs from the sidecar's: corrupt); passing over it to an older one")
    assert said.out.strip() == (f"fastpipe.consolidate: wrote {out} (and its sidecar model.json) from {older}, the "
                                "weights of step 4")
    assert torch.load(out, weights_only=True)["step"] == 4
