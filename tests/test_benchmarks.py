"""The benchmark scripts' CPU smoke modes, so the scripts the GPU numbers come from cannot rot."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO


@pytest.mark.slow
def test_overhead_benchmark_smoke(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "overhead.py"), "--out", str(tmp_path), "--smoke"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "overhead.jsonl").read_text().splitlines()]
    assert {r["runner"] for r in rows} == {"hand", "fastpipe"}
    assert all(r["status"] == "ok" and r["throughput"] > 0 for r in rows)
    table = (tmp_path / "overhead.md").read_text()
    assert "| resnet18 | off |" in table and "x |" in table
