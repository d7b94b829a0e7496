"""benchmarks/large_models.py --smoke, in the test's process: its H200 phases 2 and 3 on the CPU, and what their runs show.

One script run covers the batch search's command, a GPT built on its device (the 10B build's command
at a tiny shape) and the fp8-against-bf16 loss pair, whose fp8 run is torchao's emulation, compiled
(compile.backend=eager on the CPU): graph.txt names the converted layers and it trains like bf16.
"""
from __future__ import annotations

import json
import math
import sys
import tarfile

import pytest
from benchmark_runs import BENCH, commands_here, here

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def phase2(tmp_path_factory):
    """The script and each run it starts, in this process (tests/support/benchmark_runs.py)."""
    out = tmp_path_factory.mktemp("large_models")
    with commands_here():
        proc = here([sys.executable, BENCH / "large_models.py", "--phase", "2,3", "--out", out, "--smoke",
                     "--deadline", "400"], cwd=BENCH)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc.stdout


def test_each_phase_writes_its_table_rows_and_archive(phase2):
    out, stdout = phase2
    for phase in ("p2", "p3"):
        files = sorted(p.name for p in (out / phase).iterdir() if p.is_file())
        assert files == ["large_models.jsonl", "large_models.log", "large_models.md", "runs.tgz"]
    folder = out / "p2"
    rows = {r["what"]: r for r in map(json.loads, (folder / "large_models.jsonl").read_text().splitlines())}
    assert all(r["status"] == "ok" for r in rows.values()), rows
    search = rows["batch search resnet50"]
    assert search["chosen"] == 64 and search["probes"] == 2 and search["search_s"] > 0  # 32 fits, then the cap 64
    assert rows["10B GPT build"]["model_build_s"] is not None
    with tarfile.open(folder / "runs.tgz") as tar:
        assert {"runs/build10b/graph.txt", "runs/search/metrics.json"} <= set(tar.getnames())
    with tarfile.open(out / "p3" / "runs.tgz") as tar:
        assert "runs/loss-fp8/graph.txt" in tar.getnames()
    assert stdout.strip().splitlines()[0] == "large_models phase 2 (smoke: CPU, tiny models)"
    assert "large_models phase 3 (smoke: CPU, tiny models)" in stdout


def test_the_emulated_fp8_run_trains_the_layers_graph_txt_names_as_bf16_does(phase2):
    folder = phase2[0] / "p3"
    graph = (folder / "runs" / "loss-fp8" / "graph.txt").read_text()
    metrics = json.loads((folder / "runs" / "loss-fp8" / "metrics.json").read_text())
    assert metrics["fp8"]["converted"] == [f"blocks.{i}.{p}" for i in range(4)
                                           for p in ("attn.qkv", "attn.proj", "mlp.0", "mlp.2")]
    assert "blocks.[0-3].attn.qkv, blocks.[0-3].attn.proj, blocks.[0-3].mlp.0, blocks.[0-3].mlp.2" in graph
    assert "kept in bf16: lm_head (weight tied to wte.weight)" in graph and metrics["fp8"]["emulated"]
    bf16 = json.loads((folder / "runs" / "loss-bf16" / "metrics.json").read_text())
    assert metrics["val_loss"] < math.log(256) - 0.5  # it learned the corpus's bytes
    assert metrics["val_loss"] == pytest.approx(bf16["val_loss"], rel=0.02)  # and stayed with bf16
