"""Where a run's imports go, beside a hand loop's (the start-up part of the time to a target).

Each measurement is a fresh Python process timed from its own start (``/proc``) to the end of its
imports, alternating, ``--repeats`` times each:

- ``hand``: ``import torch, torchvision`` (what the hand loop of time_to_target_overhead.py imports);
- ``fastpipe``: what ``python -m fastpipe`` imports before its first step, in its one process (Hydra, the
  entry point, ``fastpipe.job.training``, torchvision);
then once with ``-X importtime``, the modules fastpipe imports beyond the hand loop's, largest
cumulative first. Writes ``$OUT/start_imports.md`` (printed last) and ``start_imports.log``.

    bash .devwheels/base/install.sh && export PYTHONPATH=/tmp/site:$PWD && \\
        python3 benchmarks/start_imports.py --out $OUT
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

# the process's start is read after the measured imports (from /proc: the reading costs nothing inside them)
TIMED = ("import time\n"
         "{imports}\n"
         "done = time.time()\n"
         "import json\n"
         "from fastpipe.machine import process_started_at\n"
         "print(json.dumps({{'seconds': done - process_started_at()}}))\n")
KINDS = {"hand": "import torch, torchvision",
         "fastpipe": "import hydra, fastpipe.__main__, fastpipe.job.training, torchvision"}


def timed(kind: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", TIMED.format(imports=KINDS[kind])], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def seconds(process: subprocess.Popen, log) -> float:
    out, _ = process.communicate()
    log.write(out)
    return json.loads(out.strip().splitlines()[-1])["seconds"]


def importtime(kind: str, log) -> dict:
    """Each module's own import time (s, its imports not counted) under ``-X importtime``."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", KINDS[kind]], capture_output=True, text=True)
    modules = {}
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "cumulative" not in line:
            own, _, name = line[len("import time:"):].split("|")
            modules[name.strip()] = int(own) / 1e6
    log.write(f"{kind}: {len(modules)} modules\n")
    return modules


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    times = {"hand": [], "fastpipe": []}
    with open(a.out / "start_imports.log", "w") as log:
        seconds(timed("fastpipe"), log)  # the files into the page cache first
        for _ in range(a.repeats):
            for kind in ("hand", "fastpipe"):
                times[kind].append(seconds(timed(kind), log))
        hand, ours = importtime("hand", log), importtime("fastpipe", log)
    lines = ["## Imports: a fresh process's start to the end of its imports (s)", "",
             "| what | median | each |", "| --- | ---: | --- |"]
    lines += [f"| {k} | {statistics.median(v):.2f} | {', '.join(f'{x:.2f}' for x in v)} |" for k, v in times.items()]
    packages: dict = {}
    for module, own in ours.items():
        if module not in hand:
            packages[module.split(".")[0]] = packages.get(module.split(".")[0], 0.0) + own
    lines += ["", "## What fastpipe imports beyond torch and torchvision: each package's modules' own time "
              "(s, -X importtime)", "", "| package | modules' own time |", "| --- | ---: |"]
    lines += [f"| {m} | {s:.3f} |" for m, s in sorted(packages.items(), key=lambda kv: -kv[1])[:15]]
    lines += [f"| (all: {sum(packages.values()):.3f} s; torch and torchvision's own: "
              f"{sum(hand.values()):.3f} s) | |"]
    text = "\n".join(lines) + "\n"
    (a.out / "start_imports.md").write_text(text)
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
