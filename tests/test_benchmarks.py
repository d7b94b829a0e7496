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


def _load_trace_summary():
    import importlib.util

    spec = importlib.util.spec_from_file_location("trace_summary", REPO / "benchmarks" / "trace_summary.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_trace_summary_reads_busy_time_exposed_collectives_and_gaps(tmp_path):
    """A hand-made trace of two 10 ms steps: compute on stream 7, an all-reduce on stream 20 that
    overlaps compute for 1 ms and runs alone for 2 ms, a 3 ms idle gap while the host synchronises."""
    ts = _load_trace_summary()

    def ev(cat, name, start, dur, **args):
        return {"ph": "X", "cat": cat, "name": name, "ts": start, "dur": dur, "pid": 0, "tid": args.pop("tid", 1),
                "args": args}
    events = [ev("user_annotation", "ProfilerStep#5", 0, 10_000), ev("user_annotation", "ProfilerStep#6", 10_000, 10_000),
              ev("kernel", "conv", 0, 4_000, stream=7), ev("kernel", "ncclAllReduce", 3_000, 3_000, stream=20),
              ev("kernel", "conv", 9_000, 11_000, stream=7),
              ev("kernel", "ncclDevKernel_Broadcast_RING_LL(args)", 19_000, 10, stream=20),
              ev("cuda_runtime", "cudaStreamSynchronize", 6_000, 3_000, tid=1),
              ev("cpu_op", "aten::item", 6_000, 3_000),
              ev("cpu_op", "aten::long_op_elsewhere", 0, 6_010, tid=2),  # touches the gap by 10 us only
              ev("kernel", "late", 25_000, 1_000, stream=7)]  # after the last step: not counted
    path = tmp_path / "t.pt.trace.json.gz"
    import gzip
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events + [{"ph": "i", "name": "marker", "ts": 1}]}, f)
    text = ts.summarize(ts.load_events(path))
    assert "2 profiled steps, 20.0 ms: 10.00 ms per step" in text
    assert "GPU busy 85.0% of the span" in text  # 0-6 ms and 9-20 ms
    assert "stream 7: busy 15.0 ms, 2 activities" in text  # the kernel after the last step is left out
    assert "stream 20: busy 3.0 ms, 2 activities (2 NCCL)" in text
    assert "NCCL kernels 3.0 ms, of which 2.00 ms" in text
    assert "ncclDevKernel_Broadcast_RING_LL on stream 20: 0.5 per step" in text
    assert "cudaStreamSynchronize" in text and "1.50 ms" in text  # 3 ms over 2 steps
    assert "GPU idle 1.50 ms per step (15.0% of the span); gaps >= 50 us: 1 (0.5 per step)" in text
    assert "aten::item (tid 1)" in text and "long_op_elsewhere" not in text.split("gaps >= 50 us")[1]
    assert ts.subtract([[0, 10]], [[2, 3], [5, 12]]) == [(0, 2), (3, 5)]
    assert ts.subtract([[10, 20], [0, 5]], [[12, 13], [1, 2]]) == [(0, 1), (2, 5), (10, 12), (13, 20)]  # unsorted
    assert "zero length" in ts.summarize([ev("user_annotation", "ProfilerStep#1", 5, 0)])
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "trace_summary.py"), str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "GPU busy" in proc.stdout
