"""``python -m fastpipe.doctor`` exactly as a user runs it: a fresh process, from a folder outside the repository."""
import subprocess
import sys

import pytest

from fastpipe.machine import cpu_bf16


@pytest.mark.slow
def test_the_doctor_run_from_another_folder_says_a_healthy_machine_is_ok(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "fastpipe.doctor"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "fastpipe doctor" and lines[-1] == "  status       ok"
    assert "No CUDA runtime is found" not in proc.stderr  # torch's CUDA_HOME line: the report says where CUDA is
    assert not [line for line in lines if line.startswith("  problem")]
    assert "  plugins      hydra/launcher=gpus, hydra/sweeper=halving (found by Hydra's plugin scan)" in lines
    native = cpu_bf16()["native"]
    row = next(line for line in lines if line.startswith("  CPU bf16     "))
    assert row.split()[2] == {True: "native", False: "emulated", None: "unknown"}[native]
