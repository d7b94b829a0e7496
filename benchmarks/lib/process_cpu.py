"""Where the test suite's CPU goes: every Python process it starts, with the test that started it and
its own CPU seconds (user + system), summed by kind of process and by test.

A `.pth` file in the virtual environment's site-packages logs each process when FP_PROC_LOG names a
file (`S pid ppid time test || argv` at start, `E pid cpu_s time` at a normal exit; a process killed by
a signal logs no end):

    python3 benchmarks/lib/process_cpu.py --pth > "$(python -c 'import site; print(site.getsitepackages()[0])')/zz_proc_cpu.pth"
    FP_PROC_LOG=/tmp/proc.log python -m pytest -q
    python3 benchmarks/lib/process_cpu.py /tmp/proc.log
"""
from __future__ import annotations

import collections
import sys

PTH = ('import os, sys, time, atexit; (os.environ.get("FP_PROC_LOG") and not getattr(sys, "_fp_logged", False) and '
       '(setattr(sys, "_fp_logged", True), open(os.environ["FP_PROC_LOG"], "a").write("S %d %d %.3f %s || %s\\n" % '
       '(os.getpid(), os.getppid(), time.time(), os.environ.get("PYTEST_CURRENT_TEST", "-"), " ".join(sys.argv)[:150])), '
       'atexit.register(lambda: open(__import__("os").environ["FP_PROC_LOG"], "a").write("E %d %.2f %.3f\\n" % '
       '(__import__("os").getpid(), sum(__import__("os").times()[:2]), __import__("time").time())))))')


def read(path: str):
    """({pid: (test, argv)}, {pid: parent pid}, {pid: CPU seconds})."""
    started, parents, cpu = {}, {}, {}
    for line in open(path):
        fields = line.split()
        if fields[0] == "S":
            test, argv = line.split(" ", 4)[4].split(" || ", 1)
            started[int(fields[1])], parents[int(fields[1])] = (test.split(" (")[0], argv.strip()), int(fields[2])
        elif fields[0] == "E":
            cpu[int(fields[1])] = float(fields[2])
    return started, parents, cpu


def kind(argv: str, parent_argv: str, test: str) -> str:
    if test == "-":
        return "pytest's own processes (in-process tests)"
    if "--multiprocessing-fork" in argv:
        return "spawned by `python -m` (fastpipe's training processes)" if parent_argv.startswith("-m") else "spawned by others"
    if argv.startswith("-m -m"):
        return "`python -m ... -m` (fastpipe sweeps)"
    if argv.startswith("-m"):
        return "`python -m ...` (fastpipe runs, other modules)"
    return "`python -c` (resource trackers, workers)" if argv.startswith("-c") else "scripts (benchmarks)"


def main(path: str, top: int = 15) -> None:
    started, parents, cpu = read(path)
    print(f"{len(started)} processes, {len(cpu)} ended normally, {sum(cpu.values()):.0f} CPU-s logged\n")
    print("| kind | processes | CPU-s |\n| --- | ---: | ---: |")
    kinds = collections.defaultdict(lambda: [0, 0.0])
    for pid, (test, argv) in started.items():
        k = kinds[kind(argv, started.get(parents[pid], ("", ""))[1], test)]
        k[0], k[1] = k[0] + 1, k[1] + cpu.get(pid, 0.0)
    for name, (n, seconds) in sorted(kinds.items(), key=lambda item: -item[1][1]):
        print(f"| {name} | {n} | {seconds:.1f} |")
    print(f"\n| test (the {top} costliest in their processes) | processes | CPU-s |\n| --- | ---: | ---: |")
    tests = collections.defaultdict(lambda: [0, 0.0])
    for pid, (test, _) in started.items():
        if test != "-":
            tests[test][0] += 1
            tests[test][1] += cpu.get(pid, 0.0)
    for test, (n, seconds) in sorted(tests.items(), key=lambda item: -item[1][1])[:top]:
        print(f"| `{test}` | {n} | {seconds:.1f} |")


if __name__ == "__main__":
    if sys.argv[1:] == ["--pth"]:
        print(PTH)
    else:
        main(sys.argv[1])
