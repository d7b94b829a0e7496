"""Sharded (DCP) checkpoint folders: verified, rotated, resolved; what consolidate refuses."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from fastpipe.checkpoint.disk import checkpoints_in, resolve_candidates, rotate, verify
from fastpipe.errors import ConfigError, DataError


def _fake_sharded(folder: Path, step: int) -> Path:
    """A published sharded checkpoint (two files and a sidecar), as checkpoint_dcp.publish writes it."""
    from fastpipe.checkpoint.dcp import publish

    partial = folder / f".step-{step:08d}.dcp.partial"
    partial.mkdir(parents=True)
    (partial / "__0_0.distcp").write_bytes(os.urandom(100))
    (partial / "train_state.pt").write_bytes(b"x" * 10)
    return publish(partial, folder / f"step-{step:08d}.dcp", {"step": step})


def test_sharded_checkpoint_folders_verify_rotate_and_resolve(tmp_path):
    first, second, third = (_fake_sharded(tmp_path, s) for s in (2, 4, 6))
    assert checkpoints_in(tmp_path) == [third, second, first] and verify(third) is None
    (third / "__0_0.distcp").write_bytes(os.urandom(100))  # same size, other bytes
    assert "SHA-256" in verify(third)
    (second / "__0_0.distcp").unlink()
    assert "missing" in verify(second)
    assert resolve_candidates(str(second), tmp_path) == [second, first]  # a given folder, then older ones
    (tmp_path / ".step-00000008.dcp.partial").mkdir()  # an interrupted save
    rotate(tmp_path, keep=1)
    assert checkpoints_in(tmp_path) == [third] and not (tmp_path / ".step-00000008.dcp.partial").exists()
    assert not (tmp_path / "step-00000002.json").exists()


def test_consolidate_refuses_what_it_cannot_convert(tmp_path):
    from fastpipe.cli.consolidate import consolidate

    with pytest.raises(ConfigError, match="not a sharded checkpoint"):
        consolidate(tmp_path / "nothing", tmp_path / "out.pt")
    with pytest.raises(DataError, match="no complete sharded checkpoint"):
        consolidate(tmp_path, tmp_path / "out.pt")
    bad = _fake_sharded(tmp_path / "checkpoints", 3)
    (bad / "train_state.pt").write_bytes(b"y" * 10)
    with pytest.raises(DataError, match="not a complete checkpoint"):
        consolidate(bad, tmp_path / "out.pt")


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_sharded_checkpoint_of_another_model_is_one_line_naming_the_first_mismatch(tmp_path):
    """DCP's CheckpointException is a BaseException whose text lists only the failed ranks: the line names the
    first rank's own error instead (a tensor of another shape)."""
    from types import SimpleNamespace

    import torch
    import torch.distributed.checkpoint as dcp

    from fastpipe.checkpoint.dcp import _model_and_optimizer, load_sharded

    def net(width):
        model = torch.nn.Linear(4, width)
        return model, torch.optim.SGD(model.parameters(), lr=0.1)

    dcp.save(_model_and_optimizer(*net(8)), checkpoint_id=tmp_path / "step.dcp", no_dist=True)
    model, optimizer = net(16)
    with pytest.raises(DataError, match=r"step.dcp does not fit this run's model Net \(ValueError: Size mismatch between "
                                        r"saved torch.Size\(\[8, 4\]\) and current: torch.Size\(\[16, 4\]\) for "
                                        r"model.weight\); resume a checkpoint of the same model"):
        load_sharded(SimpleNamespace(model=model, optimizer=optimizer), tmp_path / "step.dcp", "Net")
