"""Runtime set-up: the one place that reads the environment sets what must be set before CUDA starts."""
from __future__ import annotations

from conftest import make_settings


def test_cuda_alloc_conf_is_exported_before_cuda(monkeypatch):
    import os

    from fastpipe.runtime import setup_runtime

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    setup_runtime(make_settings(["runtime.cuda_alloc_conf=expandable_segments:True"]))
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"


def test_a_cpu_run_drops_torchs_no_cuda_runtime_note_and_only_it():
    """Inductor's C++ builder imports torch.utils.cpp_extension, which warned "No CUDA runtime is found, using
    CUDA_HOME=..." in every compiled CPU run on a machine with a CUDA toolkit; its other messages still pass."""
    import logging

    from fastpipe.runtime import setup_runtime

    setup_runtime(make_settings(["device=cpu"]))
    log, seen = logging.getLogger("torch.utils.cpp_extension"), []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    log.addHandler(handler)
    try:
        log.warning("No CUDA runtime is found, using CUDA_HOME='%s'", "/usr/local")
        log.warning("Error building extension 'mine'")
    finally:
        log.removeHandler(handler)
    assert seen == ["Error building extension 'mine'"]


def test_the_clock_starts_at_fastpipes_import_not_at_a_shells_start_that_exec_kept():
    """Under ``bash -c '... && python -m fastpipe'`` the process keeps the shell's start through the exec: a
    160 s install was once booked as imports. The clock starts at fastpipe's first import instead."""
    import subprocess
    import sys

    code = ("import time, fastpipe; from fastpipe.__main__ import clock_started_at; "
            "from fastpipe.machine import process_started_at; "
            "print(time.time() - clock_started_at(), time.time() - process_started_at())")
    out = subprocess.run(["bash", "-c", f'sleep 1.5; exec {sys.executable} -c "{code}"'], capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    on_clock, since_process = map(float, out)
    assert since_process >= 1.4 and on_clock < since_process - 1.4
