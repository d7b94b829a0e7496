"""The one way the benchmark scripts start fastpipe (and their hand-written reference loops).

Every run is a fresh process in its own process group, with PYTHONUNBUFFERED=1, its output teed line
by line into the script's log as it comes (a run cut off still leaves its output behind). A run that
outlives its timeout gets SIGTERM (fastpipe then records why it stopped), then SIGKILL, sent to the
whole group: DDP workers and compile workers go with it. ``run_fastpipe`` never raises: it returns
the run's metrics.json, or a failed row whose ``reason`` says why (the timeout and its seconds, the
run's own reason, the last ``fastpipe: error:`` line, a traceback's last line, Hydra's message, the
exit code, or a missing metrics.json).

``Deadline`` is a script's wall-clock budget (``--deadline SECONDS``): a run that cannot finish in
what is left is not started but recorded as skipped, and a run that starts gets at most what is left
as its timeout, so a script given a budget ends inside it with every finished run's row written.
``append_jsonl`` and ``write_markdown_table`` write those rows the moment each run ends.

Shell scripts use the same runner from the command line (one run or sweep, its row appended to a jsonl):

    python benchmarks/lib/runner.py --name prep --out /tmp/prep --timeout 240 --log /tmp/prep.log \
        --jsonl /tmp/runs.jsonl -- model=tiny_cnn data=mmap train.max_steps=1
    python benchmarks/lib/runner.py --multirun --name sweep --out /tmp/sweep ... -- compile=off,default
"""
from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Sequence, TextIO, Tuple, Union

REPO = Path(__file__).resolve().parents[2]
FASTPIPE = [sys.executable, "-m", "fastpipe"]  # the command; tests swap in a stand-in
KILL_GRACE_S = 10  # after SIGTERM: time for fastpipe to record the stop before SIGKILL
TAIL_LINES = 200  # per stream, kept in memory to find a failure's reason


@dataclass
class Finished:
    """How a command ended: exit code (None if it was killed on timeout), wall time, output tails."""

    code: Optional[int]
    wall_s: float
    timed_out: bool
    timeout_s: float
    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)


def run_command(cmd: Sequence, timeout_s: float, log: TextIO, env: Optional[dict] = None,
                cwd: Path = REPO) -> Finished:
    """Run ``cmd`` in a new process session, teeing stdout and stderr into ``log``; never raises."""
    cmd = [str(c) for c in cmd]
    full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    log.write(f"$ {shlex.join(cmd)}\n")
    log.flush()
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, errors="replace", bufsize=1, start_new_session=True)
    except OSError as exc:  # a missing interpreter or script: a failed run like any other
        log.write(f"[could not start: {exc}]\n\n")
        return Finished(None, 0.0, False, timeout_s, [], [f"could not start: {exc}"])
    lock = threading.Lock()
    tails = (deque(maxlen=TAIL_LINES), deque(maxlen=TAIL_LINES))
    readers = [threading.Thread(target=_tee, args=(stream, log, lock, tail), daemon=True)
               for stream, tail in zip((proc.stdout, proc.stderr), tails)]
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        code = proc.wait(timeout=max(1.0, timeout_s))
    except subprocess.TimeoutExpired:
        timed_out = True
        code = _kill_group(proc)
    for reader in readers:  # a straggler holding the pipe must not hang the benchmark
        reader.join(timeout=5)
    wall = time.perf_counter() - start
    with lock:
        log.write(f"[exit {code}{f', killed after {timeout_s:.0f} s (timeout)' if timed_out else ''}, "
                  f"{wall:.0f} s wall]\n\n")
        log.flush()
    return Finished(None if timed_out else code, wall, timed_out, timeout_s, list(tails[0]), list(tails[1]))


def _tee(stream, log: TextIO, lock: threading.Lock, tail: deque) -> None:
    for line in stream:
        tail.append(line.rstrip("\n"))
        with lock:
            log.write(line)
            log.flush()


def _kill_group(proc: subprocess.Popen) -> Optional[int]:
    """SIGTERM to the whole group, SIGKILL to whatever is left after the grace period."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:  # the leader is gone; its children may not be
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        break
    return proc.poll()


def failure_reason(done: Finished) -> str:
    """Why a command failed, from its end and its output (one line)."""
    if done.timed_out:
        return f"timed out after {done.timeout_s:.0f} s (process group killed)"
    errors = [line.split("fastpipe: error:", 1)[1].strip() for line in done.stderr if "fastpipe: error:" in line]
    if errors:
        return errors[-1]
    lines = [line for line in done.stderr if line.strip()]
    tracebacks = [i for i, line in enumerate(lines) if line.startswith("Traceback")]
    if tracebacks:
        return lines[-1].strip()
    hydra = [i for i, line in enumerate(lines) if "HYDRA_FULL_ERROR" in line]
    if hydra:  # Hydra's own message (a bad override, a missing config): its unindented lines
        top = [line.strip() for line in lines[:hydra[-1]] if not line.startswith((" ", "\t"))]
        return " ".join(top[:3])
    last = lines[-1].strip() if lines else "no output on stderr"
    return f"exit code {done.code}: {last}" if done.code else last


def run_fastpipe(overrides: Sequence[str], run_dir: Union[str, Path], timeout_s: float, log: TextIO,
                 env: Optional[dict] = None, multirun: bool = False) -> dict:
    """``python -m fastpipe OVERRIDES`` into ``run_dir`` (emptied first) -> its metrics.json, or a failed row.

    ``multirun``: ``python -m fastpipe -m ...`` with ``run_dir`` as the sweep folder (kept, so that
    ``sweep.resume=true`` can continue it) -> a row counting the jobs, with every job's metrics.
    Every row has ``wall_s`` and ``run_dir``; a failed one ``status`` "failed" and ``reason``.
    """
    run_dir = Path(run_dir).resolve()
    if multirun:
        cmd = [*FASTPIPE, "-m", *overrides, f"hydra.sweep.dir={run_dir}"]
    else:
        shutil.rmtree(run_dir, ignore_errors=True)  # no earlier run's result can be read as this one's
        cmd = [*FASTPIPE, *overrides, f"hydra.run.dir={run_dir}"]
    done = run_command(cmd, timeout_s, log, env)
    row = _sweep_row(run_dir, done) if multirun else _run_row(run_dir, done)
    row.update(wall_s=done.wall_s, run_dir=str(run_dir))
    return row


def _run_row(run_dir: Path, done: Finished) -> dict:
    metrics = read_json(run_dir / "metrics.json")
    if metrics is not None and metrics.get("status") == "ok":
        if done.timed_out:  # it finished, then the timeout caught it exiting: its results stand
            metrics["note"] = f"results written before the {done.timeout_s:.0f} s timeout stopped the process"
        return metrics
    row = dict(metrics or {}, status="failed")
    if done.timed_out or not row.get("reason"):
        if row.get("reason"):
            row["fastpipe_reason"] = row["reason"]
        row["reason"] = (failure_reason(done) if done.timed_out or done.code else
                         f"no metrics.json in {run_dir} (exit code {done.code})")
    row["exit_code"] = done.code
    return row


def _sweep_row(sweep_dir: Path, done: Finished) -> dict:
    jobs = [read_json(p) or {"status": "failed", "reason": f"unreadable {p}"}
            for p in sorted(sweep_dir.glob("*/metrics.json"), key=lambda p: (len(p.parent.name), p.parent.name))]
    failed = [j for j in jobs if j.get("status") != "ok"]
    row = {"status": "ok" if done.code == 0 and jobs and not failed else "failed", "exit_code": done.code,
           "jobs": len(jobs), "jobs_ok": len(jobs) - len(failed), "job_metrics": jobs,
           "report": str(sweep_dir / "report.md") if (sweep_dir / "report.md").exists() else None}
    if row["status"] != "ok":
        row["reason"] = (failure_reason(done) if done.timed_out or done.code else
                         f"{len(failed)} of {len(jobs)} jobs failed: {failed[0].get('reason')}" if failed else
                         f"no job wrote metrics.json in {sweep_dir}")
    return row


def run_json(cmd: Sequence, timeout_s: float, log: TextIO, env: Optional[dict] = None) -> dict:
    """A script that prints its result as one JSON line last (the hand loops): that dict, or a failed row."""
    done = run_command(cmd, timeout_s, log, env)
    if done.code == 0:
        for line in reversed(done.stdout):
            if line.startswith("{"):
                try:
                    return dict(json.loads(line), status="ok", wall_s=done.wall_s)
                except ValueError:
                    break
        return {"status": "failed", "reason": "no JSON line on stdout", "wall_s": done.wall_s}
    return {"status": "failed", "reason": failure_reason(done), "exit_code": done.code, "wall_s": done.wall_s}


def config_refusal(overrides: Sequence[str], log: TextIO, timeout_s: float = 120) -> Optional[str]:
    """None if this fastpipe composes ``overrides`` (``--cfg job``: nothing runs), else Hydra's reason.

    Lets a script skip a variant whose key (or launcher, or config) this version of fastpipe lacks.
    """
    done = run_command([*FASTPIPE, *overrides, "--cfg", "job"], timeout_s, log)
    return None if done.code == 0 else failure_reason(done)


class Deadline:
    """A script's wall-clock budget: what is left, whether a run fits, the timeout a run may have.

    A run is expected to need as long as the longest earlier run of the same ``kind``, or ``floor_s``
    before any ran; the kill grace is kept back so a killed run still ends inside the budget.
    """

    def __init__(self, seconds: Optional[float], floor_s: float = 30.0) -> None:
        self.end = None if seconds is None else time.monotonic() + seconds
        self.floor_s = floor_s
        self.walls: dict = {}

    def left(self) -> float:
        return math.inf if self.end is None else self.end - time.monotonic() - KILL_GRACE_S

    def timeout(self, cap_s: float) -> float:
        return max(1.0, min(cap_s, self.left()))

    def skip_reason(self, kind: str = "run") -> Optional[str]:
        """None when a run of ``kind`` fits in what is left, else the 'skipped: no time left' reason."""
        need, left = self.walls.get(kind, self.floor_s), self.left()
        if left >= need:
            return None
        return f"skipped: no time left ({max(0.0, left):.0f} s of the --deadline left, a run needs ~{need:.0f} s)"

    def record(self, kind: str, wall_s: Optional[float]) -> None:
        if wall_s:
            self.walls[kind] = max(wall_s, self.walls.get(kind, 0.0))


def chosen_cases(parser, text: str, known) -> List[str]:
    """``--cases a,b``: the names given, each one of ``known`` (else the parser's one-line error)."""
    cases = [c for c in text.split(",") if c]
    unknown = [c for c in cases if c not in known]
    if unknown:
        parser.error(f"--cases: unknown {', '.join(unknown)}; choose from {', '.join(known)}")
    return cases


def header(smoke: bool = False) -> str:
    """A results table's first line: when, the machine's cores, its load and threads, and --smoke."""
    return (f"# {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC · {os.cpu_count()} CPU cores · load "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} · OMP_NUM_THREADS="
            f"{os.environ.get('OMP_NUM_THREADS', 'unset')}" + (" · --smoke" if smoke else ""))


def skipped(reason: str, **row) -> dict:
    """The row of a run that was not started (no time left, a key this fastpipe lacks)."""
    return dict(row, status="skipped", reason=reason)


def add_common_args(parser, timeout_s: int) -> None:
    """--timeout and --deadline, the same in every script."""
    parser.add_argument("--timeout", type=int, default=timeout_s, help=f"seconds before one run counts as "
                        f"failed and is killed (default {timeout_s})")
    parser.add_argument("--deadline", type=float, default=None, metavar="SECONDS",
                        help="wall-clock budget of the whole script: runs that cannot finish in what is left "
                             "are skipped ('skipped: no time left'), started ones get at most what is left")


def read_json(path: Path) -> Optional[dict]:
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def append_jsonl(path: Union[str, Path], row: dict) -> None:
    """One line per finished run, written (and flushed) the moment it ends."""
    with open(path, "a") as f:
        f.write(json.dumps(row, default=str) + "\n")


def read_jsonl(path: Union[str, Path]) -> List[dict]:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return []
    rows = []
    for line in lines:
        try:
            rows.append(json.loads(line))
        except ValueError:  # a line cut off by a kill: the others still count
            continue
    return rows


Column = Union[Tuple[str, Union[str, Callable]], Tuple[str, Union[str, Callable], str]]


def write_markdown_table(path: Union[str, Path, None], rows: Iterable[dict], columns: Sequence[Column],
                         title: str = "", notes: Sequence[str] = ()) -> str:
    """A markdown table of ``rows``; each column is (heading, key or function of the row[, format spec]).

    Columns with a format spec hold numbers (right-aligned; missing values are '—'); a ``status``
    column shows 'ok', or the row's reason. ``title`` lines go above, ``notes`` below. Written to
    ``path`` (unless None) and returned.
    """
    lines = [title, ""] if title else []
    lines.append("| " + " | ".join(c[0] for c in columns) + " |")
    lines.append("| " + " | ".join("---:" if len(c) > 2 else "---" for c in columns) + " |")
    for row in rows:
        cells = []
        for column in columns:
            getter = column[1]
            value = getter(row) if callable(getter) else row.get(getter)
            cells.append(_cell(value, column[2] if len(column) > 2 else None))
        lines.append("| " + " | ".join(cells) + " |")
    if notes:
        lines += [""] + list(notes)
    text = "\n".join(lines) + "\n"
    if path is not None:
        tmp = Path(f"{path}.tmp")
        tmp.write_text(text)
        tmp.replace(path)  # a reader (or a kill) never sees half a table
    return text


def _cell(value, spec: Optional[str]) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if spec and isinstance(value, (int, float)):
        return format(value, spec)
    return re.sub(r"\s+", " ", str(value)).replace("|", "/")[:300]


def status_text(row: dict) -> str:
    """'ok', or the reason (a skipped row's reason already starts with 'skipped:')."""
    status = row.get("status", "failed")
    if status == "ok":
        return "ok"
    reason = str(row.get("reason") or "?")
    return reason if reason.startswith(f"{status}:") else f"{status}: {reason}"


def summarize(runs: List[dict], keys: Sequence[str], value: str) -> dict:
    """One table line for the repeats of one kind of run: the median of each of ``keys`` over the ok
    runs, every run's ``value`` ("runs"), and 'ok' or the distinct reasons of the others ("status")."""
    ok = [r for r in runs if r.get("status") == "ok"]
    line = {key: median(r.get(key) for r in ok) for key in keys}
    line["runs"] = ", ".join("—" if r.get(value) is None else f"{r[value]:,.0f}" for r in runs)
    line["status"] = "ok" if len(ok) == len(runs) else "; ".join(sorted({status_text(r) for r in runs if r not in ok}))
    return line


def median(values: Iterable) -> Optional[float]:
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def main(argv=None) -> int:
    """The same runner for shell scripts: one fastpipe run or sweep, its row appended to --jsonl."""
    import argparse

    p = argparse.ArgumentParser(prog="python benchmarks/lib/runner.py", description=main.__doc__,
                                epilog="e.g. python benchmarks/lib/runner.py --name prep --out /tmp/prep --timeout 240 "
                                       "--log /tmp/logs/prep.log -- model=tiny_cnn data=mmap train.max_steps=1")
    p.add_argument("--name", default="run", help="the row's name in --jsonl and the printed line")
    p.add_argument("--out", type=Path, required=True, help="the run folder (emptied first), or the sweep folder (kept)")
    p.add_argument("--timeout", type=float, required=True, help="seconds before the process group is killed")
    p.add_argument("--log", type=Path, required=True, help="the output is appended here")
    p.add_argument("--jsonl", type=Path, help="append the result row here")
    p.add_argument("--multirun", action="store_true", help="a sweep: python -m fastpipe -m ...")
    p.add_argument("overrides", nargs=argparse.REMAINDER, help="-- then fastpipe's arguments")
    a = p.parse_args(argv)
    overrides = a.overrides[1:] if a.overrides[:1] == ["--"] else a.overrides
    a.log.parent.mkdir(parents=True, exist_ok=True)
    with open(a.log, "a") as log:
        row = run_fastpipe(overrides, a.out, a.timeout, log, multirun=a.multirun)
    row["name"] = a.name
    if a.jsonl:
        append_jsonl(a.jsonl, {k: v for k, v in row.items() if k != "job_metrics"})  # jobs keep their own files
    jobs = f", {row['jobs_ok']} of {row['jobs']} jobs ok" if a.multirun else ""
    print(f"{a.name}: {status_text(row)}{jobs}, {row['wall_s']:.0f} s wall", flush=True)
    return 0 if row["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
