"""What keeping the next job's training process ready costs a sweep on the CPU (launch/warm.py).

A sweep of ``--jobs`` small jobs on the CPU (TinyCNN on 240 shapes at 16 px, 12 steps each), run
``--repeats`` times each way, alternating: ``as built`` (on the CPU no process waits for the next job:
each job's process is spawned for it) and ``kept ready`` (the next job's process started as each job
hands its process over, as a sweep of GPU jobs does: ``trains_on_a_gpu`` answers yes). Each sweep's
wall time, the CPU seconds of every process it started (user + system, the waited-for children of
this script), and each job's training clock (``time_breakdown_s.train``): with a process kept ready
every job trains beside the next one's imports (the last beside a process that runs no job). Writes
``$OUT/sweep_warm.md`` (printed) and ``sweep_warm.jsonl``.

    python benchmarks/sweep_warm.py --out /tmp/sweep-warm
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

# "kept ready": the sweep's Hydra process told that its jobs train on a GPU
KEPT_READY = ("import fastpipe.machine as m; m.trains_on_a_gpu = lambda device: True; "
              "from fastpipe.__main__ import main; main()")
JOB = ["dataset.num_images=240", "dataset.image_size=16", "train.max_steps=12", "runtime.progress=false",
       "data.num_workers=0", "device=cpu"]


def sweep(way: str, jobs: int, folder: Path) -> dict:
    """One sweep, ``way`` ("as built" or "kept ready"): its wall seconds and its processes' CPU seconds."""
    entry = ["-c", KEPT_READY] if way == "kept ready" else ["-m", "fastpipe"]
    sizes = ",".join(str(16 * (i + 1)) for i in range(jobs))
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run([sys.executable, *entry, "-m", f"train.batch_size={sizes}", *JOB,
                           f"hydra.sweep.dir={folder}"], capture_output=True, text=True)
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    trains = [json.loads((folder / str(i) / "metrics.json").read_text())["time_breakdown_s"]["train"]
              if (folder / str(i) / "metrics.json").is_file() else None for i in range(jobs)]
    return {"way": way, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "train_s": trains, "rc": proc.returncode,
            "tail": proc.stderr.strip().splitlines()[-1:] if proc.returncode else []}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with open(a.out / "sweep_warm.jsonl", "w") as log:
        for i in range(a.repeats):
            for way in ("as built", "kept ready"):
                rows.append(dict(sweep(way, a.jobs, a.out / "sweeps" / f"{way.replace(' ', '-')}-{i}"), repeat=i))
                log.write(json.dumps(rows[-1]) + "\n")
                log.flush()
    lines = [f"# A sweep of {a.jobs} small CPU jobs, {a.repeats} runs each way, alternating", "",
             "| way | CPU s (each run) | median | wall s (each run) | median "
             "| the jobs' training clocks (s, each run) |",
             "| --- | --- | ---: | --- | ---: | --- |"]
    for way in ("as built", "kept ready"):
        mine = [r for r in rows if r["way"] == way]
        cpu, wall = [r["cpu_s"] for r in mine], [r["wall_s"] for r in mine]
        trains = "; ".join(" / ".join("-" if t is None else f"{t:.2f}" for t in r["train_s"]) for r in mine)
        lines.append(f"| {way} | {', '.join(f'{c:.1f}' for c in cpu)} | {statistics.median(cpu):.1f} | "
                     f"{', '.join(f'{w:.1f}' for w in wall)} | {statistics.median(wall):.1f} | {trains} |")
    failed = [r for r in rows if r["rc"]]
    lines += ["", f"{len(failed)} sweep(s) failed: {failed}" if failed else "Every sweep ended with exit code 0."]
    text = "\n".join(lines) + "\n"
    (a.out / "sweep_warm.md").write_text(text)
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
