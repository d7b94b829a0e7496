"""benchmarks/lib/process_cpu.py: the suite's Python processes, by kind and by test, from the hook's log."""
from __future__ import annotations

import subprocess
import sys

from conftest import load_benchmark_lib


def _process_cpu():
    return load_benchmark_lib("process_cpu")


def test_the_hook_logs_a_process_and_the_summary_adds_it_up(tmp_path, capsys):
    log = tmp_path / "proc.log"
    hook = tmp_path / "site"
    hook.mkdir()
    (hook / "zz_proc_cpu.pth").write_text(_process_cpu().PTH + "\n")
    # a site directory with the hook, as the venv's site-packages would hold it
    code = f"import site; site.addsitedir({str(hook)!r}); import time; time.sleep(0.01)"
    env = {"FP_PROC_LOG": str(log), "PYTEST_CURRENT_TEST": "tests/x.py::test_y (call)"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    lines = log.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["S", "E"] and "tests/x.py::test_y (call) || -c" in lines[0]
    log.write_text(log.read_text() + "S 1 0 0.0 - || -m pytest\nE 1 5.00 1.0\n"
                   "S 2 1 0.0 tests/x.py::test_y (call) || -m train.max_steps=1\nE 2 3.00 1.0\n"
                   "S 3 2 0.0 tests/x.py::test_y (call) || -c --multiprocessing-fork\n")  # 3: killed
    _process_cpu().main(str(log))
    out = capsys.readouterr().out
    assert out.startswith("4 processes, 3 ended normally")
    assert "| pytest's own processes (in-process tests) | 1 | 5.0 |" in out
    assert "| spawned by `python -m` (fastpipe's training processes) | 1 | 0.0 |" in out
    assert "| `tests/x.py::test_y` | 3 |" in out
