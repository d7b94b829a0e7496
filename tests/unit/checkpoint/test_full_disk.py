"""A disk that fills up during a run, and a run folder that cannot be written: one line naming the
file and the fix, metrics.json says failed where it can be written, no temporary file is left, and the
newest good checkpoint stays usable. The disk is a small tmpfs where this process may mount one
(root); elsewhere the checkpoint files' writes fail with ENOSPC (injected at the same calls)."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import TINY, run_in_process

from fastpipe.errors import Unwritable
from fastpipe.record.results import read as read_metrics

LEFT = 64 * 1024  # what the filled disk leaves: room for metrics.json, not for a checkpoint


def mounted(folder: Path, options: str) -> bool:
    """Mount a tmpfs at ``folder`` (True), or say it cannot be done here (False)."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                          capture_output=True).returncode == 0


@pytest.fixture
def disk(tmp_path, monkeypatch):
    """(folder, fill): a folder on a small disk, and fill() leaves it only LEFT bytes."""
    folder = tmp_path / "disk"
    if mounted(folder, "size=16m"):
        def fill():
            with open(folder / "filler", "wb") as fh:
                while shutil.disk_usage(folder).free > LEFT:
                    fh.write(b"\0" * min(1 << 20, shutil.disk_usage(folder).free - LEFT))
        yield folder, fill
        subprocess.run(["umount", "-l", str(folder)], check=False)
        return

    from fastpipe.checkpoint import disk

    full = []

    class Filling:  # a file whose writes fail as a full disk's do, once the disk is "full"
        def __init__(self, fh):
            self.fh = fh

        def write(self, data):
            if full:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.fh.write(data)

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    monkeypatch.setattr(disk, "open", lambda *a, **k: Filling(open(*a, **k)), raising=False)
    yield folder, lambda: full.append(True)


def test_a_disk_that_fills_during_a_run(disk, monkeypatch):
    from fastpipe.checkpoint import background
    from fastpipe.checkpoint.disk import load_state, verify

    folder, fill = disk
    rotate = background.rotate

    def rotate_then_fill(*args):  # after the first checkpoint is complete, the disk is full
        removed = rotate(*args)
        fill()
        return removed

    monkeypatch.setattr(background, "rotate", rotate_then_fill)
    run_dir = folder / "run"
    with pytest.raises(Unwritable):
        run_in_process(run_dir, TINY + ["train.checkpoint_every=4"])
    record = read_metrics(run_dir)
    first = run_dir / "checkpoints" / "step-00000004.pt"
    assert record["status"] == "failed" and record["checkpoint"] == str(first)
    assert record["reason"] == (  # step 8's write failed first (in the background), said as best.pt queues next
        f"no space left on the disk of {run_dir / 'checkpoints' / 'step-00000008.pt'} (No space left on device); "
        f"free space on its disk, or give hydra.run.dir a folder on a disk with room; the newest good checkpoint, "
        f"{first}, is intact (train.resume=auto continues from it)")
    assert not [p for p in run_dir.rglob("*") if ".tmp-" in p.name]  # no temporary file left behind
    assert not (run_dir / "checkpoints" / "step-00000008.pt").exists()  # its write (in the background) failed
    assert not (run_dir / "checkpoints" / "best.pt").exists()
    assert verify(first) is None and load_state(first)["position"]["step"] == 4


@pytest.mark.parametrize("kind", ["read-only", "full"])
def test_a_read_only_or_full_run_folder_is_one_line_before_anything_is_written(tmp_path, monkeypatch, capsys, kind):
    """What RunGuard checks as the run starts, before Hydra's job log opens in the folder."""
    from omegaconf import OmegaConf

    from fastpipe.record import writable
    from fastpipe.report.callbacks import RunGuard

    folder = tmp_path / "disk"
    if mounted(folder, "ro,size=1m" if kind == "read-only" else "size=64k"):
        if kind == "full":
            with open(folder / "filler", "wb") as fh, pytest.raises(OSError):
                fh.write(b"\0" * (1 << 20))
                fh.flush()
    else:  # where no tmpfs can be mounted: the probe's write fails as such a disk's does
        code = errno.EROFS if kind == "read-only" else errno.ENOSPC

        def refused(*args):
            raise OSError(code, os.strerror(code))

        monkeypatch.setattr(writable.os, "write", refused)
    try:
        with pytest.raises(SystemExit) as exit_info:
            RunGuard().on_run_start(OmegaConf.create({"hydra": {"run": {"dir": str(folder / "run")}}}))
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)
    assert exit_info.value.code == 2
    if kind == "read-only":
        expected = f"cannot write {folder / 'run'} (Read-only file system); give hydra.run.dir a folder you can write"
    else:
        expected = (f"no space left on the disk of {folder / 'run'} (No space left on device); free space on its "
                    "disk, or give hydra.run.dir a folder on a disk with room")
    assert capsys.readouterr().err.strip() == f"fastpipe: error: {expected}"
