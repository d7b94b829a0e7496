"""The timeline of a sampled run (lib/sampler/sitecustomize.py's files): what each process's threads
did, second by second, from the earliest process's start.

Each process's samples of a thread become segments of one activity: an import in progress (the
outermost one, with the package of the innermost: ``import fastpipe.job.training > torch._dynamo``),
else the innermost frame of fastpipe's own code, else the innermost frame. Per segment: its span,
the thread's and the process's CPU seconds in it (a thread
blocked in native code shows its last Python frame and no CPU), the machine's busy and iowait cores, and the longest gap between
two samples (the thread held the interpreter lock in native code for that long). Segments shorter
than ``--min`` seconds are counted, not listed.

    python benchmarks/lib/sampler/timeline.py FOLDER [--min 0.15]
"""
from __future__ import annotations

import argparse
from pathlib import Path


def _package(name: str, depth: int = 2) -> str:
    return ".".join(name.split(".")[:depth])


def _activity(outer: str, inner: str, own: str, frame: str) -> str:
    if outer != "None":
        return f"import {outer}" + (f" > {_package(inner)}" if inner not in ("None", outer) else "")
    return own if own != "None" else frame


def _read(path: Path):
    header, threads = None, {}
    for line in path.read_text().splitlines():
        cells = line.split("\t")
        if cells[0] == "#":
            header = {"pid": cells[1], "ppid": cells[2], "start": float(cells[3]), "argv": cells[4] if len(cells) > 4
                      else ""}
        elif len(cells) == 10:
            t, thread = float(cells[0]), cells[1]
            own, cpu, busy, iowait = (float(c) for c in cells[2:6])
            threads.setdefault(thread, []).append((t, cpu, busy, iowait, _activity(*cells[6:10]), own))
    return header, threads


def _segments(samples: list) -> list:
    """[(start, end, activity, process cpu s, busy cores, iowait cores, longest gap, thread cpu s)] of
    consecutive alike samples."""
    out, first = [], 0
    for i in range(1, len(samples) + 1):
        if i < len(samples) and samples[i][4] == samples[first][4]:
            continue
        last = samples[min(i, len(samples) - 1)]  # the next segment's first sample closes this one
        a = samples[first]
        span = max(last[0] - a[0], 1e-9)
        gaps = [samples[j + 1][0] - samples[j][0] for j in range(first, min(i, len(samples) - 1))]
        out.append((a[0], last[0], a[4], last[1] - a[1], (last[2] - a[2]) / span, (last[3] - a[3]) / span,
                    max(gaps) if gaps else 0.0, last[5] - a[5]))
        first = i
    return out


def timeline(folder: Path, min_s: float = 0.15) -> str:
    """The text timeline of every sampled process in ``folder``."""
    processes = [_read(p) for p in sorted(Path(folder).glob("*.tsv"))]
    processes = [(h, t) for h, t in processes if h is not None]
    if not processes:
        return f"(no samples in {folder})\n"
    t0 = min(h["start"] for h, _ in processes)
    lines = [f"t = 0: the first sampled process's start; times in s. Columns: start, end, span, activity, "
             f"the thread's / the process's CPU s, the machine's busy / iowait cores, the longest gap between samples"]
    for header, threads in sorted(processes, key=lambda p: p[0]["start"]):
        lines.append(f"\n## pid {header['pid']} (parent {header['ppid']}) from +{header['start'] - t0:.2f}: "
                     f"{header['argv'][:160]}")
        for thread, samples in sorted(threads.items(), key=lambda kv: (kv[0] != "main", kv[0])):
            segments = _segments(samples)
            shown = [s for s in segments if s[1] - s[0] >= min_s]
            short = [s for s in segments if s[1] - s[0] < min_s]
            lines.append(f"### thread {thread}: {samples[0][0] - t0:+.2f} to {samples[-1][0] - t0:+.2f}, "
                         f"{len(segments)} segments ({len(short)} under {min_s} s: {sum(s[1] - s[0] for s in short):.2f} s)")
            for s in shown:
                lines.append(f"{s[0] - t0:7.2f} {s[1] - t0:7.2f} {s[1] - s[0]:6.2f}  {s[2][:100]:<100}  cpu {s[7]:5.2f} / {s[3]:5.2f}"
                             f"  busy {s[4]:5.1f}  iowait {s[5]:4.1f}  gap {s[6]:5.2f}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--min", type=float, default=0.15, help="list segments at least this long (s)")
    a = p.parse_args(argv)
    print(timeline(a.folder, a.min), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
