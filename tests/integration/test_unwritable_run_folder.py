"""A read-only run folder through the command line: one line and exit 2 before Hydra opens its job
log there (with its default hydra/job_logging, a file handler in the run folder), no traceback."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from conftest import in_process


@pytest.mark.slow
def test_a_read_only_run_folder_is_one_line_from_the_command_line(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
    elif shutil.which("mount") is None or subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs",
                                                          str(folder)], capture_output=True).returncode:
        pytest.skip("root without a read-only tmpfs: no folder this process cannot write")
    try:
        proc = in_process([f"hydra.run.dir={folder / 'run'}"])
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)
        folder.chmod(0o755)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"fastpipe: error: cannot write {folder / 'run'} ({'Read-only file system' if os.geteuid() == 0 else 'Permission denied'}); "
        "give hydra.run.dir a folder you can write"]
