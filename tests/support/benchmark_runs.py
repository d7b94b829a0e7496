"""The benchmark scripts' commands run in the test's process: a Python command they start through
benchmarks/lib/runner.py (fastpipe, a hand loop, another script) is ``here``'s, so that a script's smoke
tests its logic in seconds, not in a process per run (tests/integration/test_benchmarks.py,
test_large_models.py)."""
from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, in_process

BENCH = REPO / "benchmarks"


def here(argv, env=None, cwd=None) -> subprocess.CompletedProcess:
    """``argv``, a Python command the benchmarks start (``python -m fastpipe ...``, ``python SCRIPT ...`` of a
    script under benchmarks/, ``python -m MODULE ...``, ``python -c CODE ...``), run in this process with
    ``env`` set and in ``cwd``: its exit code and what it printed. A script is imported as its siblings
    import it (its folder first on sys.path, then benchmarks/: one ``lib.runner``, the one a test patches)
    and its main() called with sys.argv set. What the hand loops set process-wide (torch's RNG,
    cudnn.benchmark, the switch interval) is put back after it, as are sys.path and the environment."""
    import contextlib
    import importlib
    import io
    import logging
    import runpy
    import traceback

    import torch

    argv = [str(a) for a in argv]
    assert argv[0] == sys.executable, argv
    if argv[1:3] == ["-m", "fastpipe"]:  # what fastpipe sets in its process, it puts back itself
        try:
            return in_process(argv[3:], cwd=cwd, env=env)
        except Exception:  # noqa: BLE001 - as the interpreter ends the command: the traceback, exit code 1
            return subprocess.CompletedProcess(argv, 1, "", traceback.format_exc())
    folder, saved_argv, saved_path, environ = os.getcwd(), sys.argv, list(sys.path), dict(os.environ)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    rng, benchmark, switch = torch.get_rng_state(), torch.backends.cudnn.benchmark, sys.getswitchinterval()
    out, err, code = io.StringIO(), io.StringIO(), 0
    try:
        os.environ.update({k: str(v) for k, v in (env or {}).items()})
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                if argv[1] == "-c":
                    sys.argv = ["-c", *argv[3:]]
                    exec(compile(argv[2], "<string>", "exec"), {"__name__": "__main__"})
                elif argv[1] == "-m":
                    sys.argv = [argv[2], *argv[3:]]
                    runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
                else:
                    script = Path(argv[1]).resolve()
                    sys.path[:0] = [str(script.parent), str(BENCH)]
                    sys.argv = [str(script), *argv[2:]]
                    code = importlib.import_module(".".join(script.relative_to(BENCH).with_suffix("").parts)).main()
                    code = code or 0
            except SystemExit as exc:
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:  # noqa: BLE001 - as the interpreter ends a script: the traceback, exit code 1
                traceback.print_exc()
                code = 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.chdir(folder)
        os.environ.clear()
        os.environ.update(environ)
        root.handlers[:] = handlers
        root.setLevel(level)
        torch.set_rng_state(rng)
        torch.backends.cudnn.benchmark = benchmark
        sys.setswitchinterval(switch)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def run_command_here(runner):
    """A stand-in for lib/runner.py's run_command: a Python command runs in this process (``here``), its
    output written to the log as it ends, a Finished as run_command returns it (never timed out: the
    timeout and the process group are run_command's, tested above with real processes); any other
    command (bash) runs as before."""
    real = runner.run_command

    def run_command(cmd, timeout_s, log, env=None, cwd=runner.REPO):
        cmd = [str(c) for c in cmd]
        if cmd[0] != sys.executable:
            return real(cmd, timeout_s, log, env, cwd)
        log.write(f"$ {shlex.join(cmd)}\n")
        log.flush()
        start = time.perf_counter()
        done = here(cmd, env=dict(env or {}, PYTHONUNBUFFERED="1"), cwd=cwd)
        wall = time.perf_counter() - start
        log.write(done.stdout + done.stderr)
        log.write(f"[exit {done.returncode}, {wall:.0f} s wall, in the test's process]\n\n")
        log.flush()
        tail = runner.TAIL_LINES
        return runner.Finished(done.returncode, wall, False, timeout_s, done.stdout.splitlines()[-tail:],
                               done.stderr.splitlines()[-tail:])
    return run_command


@contextlib.contextmanager
def commands_here():
    """For the block, the scripts' commands through lib/runner.py (and data_formats.py's own) run in this
    process; yields lib.runner, the module the scripts import."""
    import importlib

    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCH))
        runner = importlib.import_module("lib.runner")
        stand_in = run_command_here(runner)
        mp.setattr(runner, "run_command", stand_in)
        mp.setattr(importlib.import_module("data_formats"), "run_command", stand_in)  # imported by name there
        yield runner
