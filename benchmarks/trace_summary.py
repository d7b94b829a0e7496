"""Where the time goes in a torch.profiler trace (profile=on writes them): a short text summary.

Reads one Chrome-trace JSON (``*.pt.trace.json``, optionally gzipped) and reports, over the profiled
steps (the ``ProfilerStep#N`` spans):

- step wall time, and how much of it the GPU was busy (the union of kernels and copies, any stream);
- busy time per CUDA stream (the training stream, a loader's side stream, DALI's, NCCL's);
- collectives: NCCL kernel time and how much of it ran with no compute kernel beside it (exposed);
- the host: the CUDA runtime calls that cost most (synchronisations, allocations, launches), per thread;
- GPU idle gaps: how many, how long in all, and the host operations that were running in the longest.

    python benchmarks/trace_summary.py run/profile/*.pt.trace.json[.gz] [--gaps 5]
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


def subtract(a: list, b: list) -> list:
    """Parts of merged intervals ``a`` not covered by merged intervals ``b``."""
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


def summarize(events: list, gaps: int = 5) -> str:
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    if not steps:
        return "no ProfilerStep# spans in this trace (was it written by torch.profiler with a schedule?)"
    lo, hi = steps[0][0], steps[-1][1]
    span = hi - lo
    gpu = [e for e in events if e.get("cat") in GPU_CATS]
    busy = union(clip(((e["ts"], e["ts"] + e["dur"]) for e in gpu), lo, hi))
    lines = [f"{len(steps)} profiled steps, {span / 1e3:.1f} ms: {span / len(steps) / 1e3:.2f} ms per step",
             f"GPU busy {total(busy) / span:.1%} of the span (kernels and copies on any stream)"]
    if not gpu:
        lines.append("no GPU activity recorded (a CPU run, or CUDA activities were not profiled)")
    per_stream = defaultdict(list)
    for e in gpu:
        per_stream[(e.get("args") or {}).get("stream", e.get("tid"))].append((e["ts"], e["ts"] + e["dur"]))
    for stream, spans in sorted(per_stream.items(), key=lambda kv: -total(union(clip(kv[1], lo, hi)))):
        names = [e["name"] for e in gpu if (e.get("args") or {}).get("stream", e.get("tid")) == stream]
        nccl = sum("nccl" in n.lower() for n in names)
        lines.append(f"  stream {stream}: busy {total(union(clip(spans, lo, hi))) / 1e3:.1f} ms, {len(names)} "
                     f"activities{f' ({nccl} NCCL)' if nccl else ''}")
    comm = union(clip(((e["ts"], e["ts"] + e["dur"]) for e in gpu
                       if e.get("cat") == "kernel" and "nccl" in e["name"].lower()), lo, hi))
    if comm:
        compute = union(clip(((e["ts"], e["ts"] + e["dur"]) for e in gpu
                              if e.get("cat") == "kernel" and "nccl" not in e["name"].lower()), lo, hi))
        exposed = total(subtract(comm, compute))
        lines.append(f"NCCL kernels {total(comm) / 1e3:.1f} ms, of which {exposed / 1e3:.2f} ms "
                     f"({exposed / len(steps) / 1e3:.2f} ms per step) with no compute kernel running beside them")
    runtime = defaultdict(lambda: [0.0, 0])
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and lo <= e["ts"] < hi:
            slot = runtime[(e["name"], e.get("tid"))]
            slot[0] += e["dur"]
            slot[1] += 1
    if runtime:
        lines.append("host CUDA calls with the most time (per step; thread):")
        for (name, tid), (dur, count) in sorted(runtime.items(), key=lambda kv: -kv[1][0])[:8]:
            lines.append(f"  {name:<32} {dur / len(steps) / 1e3:7.2f} ms  {count / len(steps):7.1f} calls  tid {tid}")
    idle = [g for g in subtract([[lo, hi]], busy) if g[1] - g[0] >= 50] if gpu else []
    if idle:
        lines.append(f"GPU idle gaps >= 50 us: {len(idle)}, {total(idle) / 1e3:.1f} ms in all "
                     f"({total(idle) / span:.1%} of the span); the longest, with the host ops running then:")
        host = [e for e in events if e.get("cat") in HOST_CATS and not e["name"].startswith("ProfilerStep#")]
        for start, end in sorted(idle, key=lambda g: g[0] - g[1])[:gaps]:
            during = sorted({e["name"][:60] for e in host if e["ts"] < end and e["ts"] + e["dur"] > start
                             and e["dur"] >= 0.5 * (end - start)})  # ops spanning most of the gap
            lines.append(f"  {(end - start) / 1e3:6.2f} ms at +{(start - lo) / 1e3:.1f} ms: {', '.join(during[:6]) or '-'}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+", type=Path)
    p.add_argument("--gaps", type=int, default=5, help="longest GPU idle gaps to list")
    a = p.parse_args(argv)
    for path in a.traces:
        print(f"== {path}\n{summarize(load_events(path), a.gaps)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
