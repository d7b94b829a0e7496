"""Where the time goes in a torch.profiler trace (profile=on writes them): a short text summary.

Reads one Chrome-trace JSON (``*.pt.trace.json``, optionally gzipped) and reports, over the profiled
steps (the ``ProfilerStep#N`` spans):

- step wall time, and how much of it the GPU was busy (the union of kernels and copies, any stream);
- busy time per CUDA stream (the training stream, a loader's side stream, DALI's, NCCL's);
- collectives: NCCL kernel time and how much of it ran with no compute kernel beside it (exposed);
- collectives by kind (all-reduce, broadcast, ...) and stream, per step;
- the host: the CUDA runtime calls that cost most (synchronisations, allocations, launches), per
  thread, and the costliest operations on the loop's thread (inclusive time);
- GPU idle time, its gaps, and the host operations covering most of each of the longest gaps.

    python benchmarks/lib/trace_summary.py run/profile/*.pt.trace.json[.gz] [--gaps 5]
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
HOST_CATS = {"cpu_op", "user_annotation", "python_function"}


def load_events(path: Path) -> list:
    """The complete ('X') events of a trace file, gzipped or not."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return [e for e in events if e.get("ph") == "X" and "dur" in e]


def union(intervals) -> list:
    """Merged, sorted (start, end) intervals."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def clip(intervals, lo: float, hi: float) -> list:
    return [(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi]


def total(intervals) -> float:
    return sum(e - s for s, e in intervals)


def subtract(a, b) -> list:
    """Parts of intervals ``a`` not covered by intervals ``b`` (both merged first)."""
    a, b = union(a), union(b)
    out, j = [], 0
    for start, end in a:
        cur = start
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < end:
            out.append((cur, end))
    return out


def overlap(event: dict, start: float, end: float) -> float:
    return min(end, event["ts"] + event["dur"]) - max(start, event["ts"])


def kind(name: str) -> str:
    """A kernel's family: its name up to the template/argument list (ncclDevKernel_AllReduce_Sum_f32_RING_LL)."""
    return name.split("(")[0].split("<")[0]


def summarize(events: list, gaps: int = 5, ops: int = 10) -> str:
    """The text summary of a trace's profiled steps: GPU busy time per stream, the NCCL kernels and the
    time they run with no compute beside them, the host's CUDA calls and ops, and the GPU's idle gaps."""
    marks = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    if not marks:
        return "no ProfilerStep# spans in this trace (was it written by torch.profiler with a schedule?)"
    lo, hi = min(e["ts"] for e in marks), max(e["ts"] + e["dur"] for e in marks)
    span, n = hi - lo, len(marks)
    if span <= 0:
        return f"{n} profiled steps of zero length: nothing to summarise"
    inside = [e for e in events if e["ts"] < hi and e["ts"] + e["dur"] > lo]
    gpu = [e for e in inside if e.get("cat") in GPU_CATS]
    busy = union(clip(((e["ts"], e["ts"] + e["dur"]) for e in gpu), lo, hi))
    lines = [f"{n} profiled steps, {span / 1e3:.1f} ms: {span / n / 1e3:.2f} ms per step",
             f"GPU busy {total(busy) / span:.1%} of the span (kernels and copies on any stream)"]
    if not gpu:
        lines.append("no GPU activity recorded (a CPU run, or CUDA activities were not profiled)")
    lines += _streams(gpu, lo, hi) + _collectives(gpu, lo, hi, n) + _host_calls(inside, n)
    lines += _host_ops(inside, marks[0].get("tid"), n, ops)  # the thread that ran the loop (and launches the forward)
    if gpu:
        lines += _idle_gaps(inside, busy, lo, hi, n, gaps)
    return "\n".join(lines)


def _streams(gpu: list, lo: float, hi: float) -> list:
    """Each stream's busy time and activities, the busiest first."""
    per_stream = defaultdict(list)
    for e in gpu:
        per_stream[(e.get("args") or {}).get("stream", e.get("tid"))].append(e)
    stream_busy = {stream: total(union(clip(((e["ts"], e["ts"] + e["dur"]) for e in evs), lo, hi)))
                   for stream, evs in per_stream.items()}
    lines = []
    for stream in sorted(per_stream, key=lambda st: -stream_busy[st]):
        evs = per_stream[stream]
        nccl = sum("nccl" in e["name"].lower() for e in evs)
        lines.append(f"  stream {stream}: busy {stream_busy[stream] / 1e3:.1f} ms, {len(evs)} activities"
                     f"{f' ({nccl} NCCL)' if nccl else ''}")
    return lines


def _collectives(gpu: list, lo: float, hi: float, n: int) -> list:
    """The NCCL kernels' time, and the part with no compute kernel beside them, in all and per kind."""
    comm_events = [e for e in gpu if e.get("cat") == "kernel" and "nccl" in e["name"].lower()]
    if not comm_events:
        return []
    comm = union(clip(((e["ts"], e["ts"] + e["dur"]) for e in comm_events), lo, hi))
    compute = union(clip(((e["ts"], e["ts"] + e["dur"]) for e in gpu
                          if e.get("cat") == "kernel" and "nccl" not in e["name"].lower()), lo, hi))
    exposed = total(subtract(comm, compute))
    lines = [f"NCCL kernels {total(comm) / 1e3:.1f} ms, of which {exposed / 1e3:.2f} ms "
             f"({exposed / n / 1e3:.2f} ms per step) with no compute kernel running beside them"]
    kinds = defaultdict(list)  # FSDP's all-gathers and reduce-scatters, DDP's all-reduces, apart
    for e in comm_events:
        kinds[(kind(e["name"]), (e.get("args") or {}).get("stream"))].append(e)
    for (name, stream), evs in sorted(kinds.items()):
        own = union(clip(((e["ts"], e["ts"] + e["dur"]) for e in evs), lo, hi))
        alone = total(subtract(own, compute))
        lines.append(f"  {name} on stream {stream}: {len(evs) / n:.1f} per step, "
                     f"{sum(e['dur'] for e in evs) / n / 1e3:.2f} ms per step, {alone / n / 1e3:.2f} ms exposed")
    return lines


def _host_calls(inside: list, n: int) -> list:
    """The host's CUDA runtime and driver calls with the most time, per step and thread."""
    runtime = defaultdict(lambda: [0.0, 0])
    for e in inside:
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            slot = runtime[(e["name"], e.get("tid"))]
            slot[0] += e["dur"]
            slot[1] += 1
    if not runtime:
        return []
    lines = ["host CUDA calls with the most time (per step; thread):"]
    for (name, tid), (dur, count) in sorted(runtime.items(), key=lambda kv: -kv[1][0])[:8]:
        lines.append(f"  {name:<32} {dur / n / 1e3:7.2f} ms  {count / n:7.1f} calls  tid {tid}")
    return lines


def _host_ops(inside: list, main, n: int, ops: int) -> list:
    """The ``ops`` host ops with the most inclusive time on the loop's thread (``main``), per step."""
    host_ops = defaultdict(float)
    for e in inside:
        if e.get("tid") == main and e.get("cat") == "cpu_op":
            host_ops[e["name"][:70]] += e["dur"]
    if not host_ops or not ops:
        return []
    lines = [f"host ops on the loop's thread (tid {main}), inclusive time per step (nested ops count in each):"]
    for name, dur in sorted(host_ops.items(), key=lambda kv: -kv[1])[:ops]:
        lines.append(f"  {dur / n / 1e3:7.2f} ms  {name}")
    return lines


def _idle_gaps(inside: list, busy: list, lo: float, hi: float, n: int, gaps: int) -> list:
    """The GPU's idle time, and its ``gaps`` longest gaps of 50 us or more with the host ops covering them."""
    idle = [g for g in subtract([[lo, hi]], busy) if g[1] - g[0] >= 50]
    if not idle:
        return []
    all_idle = total(subtract([[lo, hi]], busy))
    lines = [f"GPU idle {all_idle / n / 1e3:.2f} ms per step ({all_idle / (hi - lo):.1%} of the span); gaps >= 50 us: "
             f"{len(idle)} ({len(idle) / n:.1f} per step), {total(idle) / n / 1e3:.2f} ms per step; the longest, "
             "with the host ops covering at least half of each (thread):"]
    host = [e for e in inside if e.get("cat") in HOST_CATS and not e["name"].startswith("ProfilerStep#")]
    for start, end in sorted(idle, key=lambda g: g[0] - g[1])[:gaps]:
        during = sorted(((overlap(e, start, end), e["name"][:60], e.get("tid")) for e in host
                         if overlap(e, start, end) >= 0.5 * (end - start)), reverse=True)
        names = ", ".join(f"{name} (tid {tid})" for _, name, tid in during[:4]) or "-"
        lines.append(f"  {(end - start) / 1e3:6.2f} ms at +{(start - lo) / 1e3:.1f} ms: {names}")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+", type=Path)
    p.add_argument("--gaps", type=int, default=5, help="longest GPU idle gaps to list")
    p.add_argument("--ops", type=int, default=10, help="host ops of the loop's thread to list")
    a = p.parse_args(argv)
    for path in a.traces:
        print(f"== {path}\n{summarize(load_events(path), a.gaps, a.ops)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
