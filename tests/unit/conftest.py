"""Fixtures of the unit tier that several packages' tests share."""
from __future__ import annotations

import gc
import signal
import sys

import pytest

from fastpipe.signals import STOP_SIGNALS


@pytest.fixture
def app(monkeypatch, capsys):
    """``python -m fastpipe ARGS`` in this process: (exit code, stdout, stderr)."""
    import fastpipe.__main__ as entry

    handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}  # main() installs its own

    def run(*args):
        monkeypatch.setattr(sys, "argv", ["fastpipe", *args])
        try:
            entry.main()
            code = 0
        except SystemExit as exc:
            code = exc.code
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture(autouse=True, scope="module")
def outlived_objects_frozen():
    """After each test module (its own fixtures' teardown first), its garbage collected and every object
    that outlived it frozen (gc.freeze): a worker process of the tier holds torch, dynamo and what the
    modules before left, and each full collection, automatic or a gc.collect() in fastpipe (the range
    test's, the batch search's), walked all of it, 0.5-1 s late in the tier; now it walks what the
    current module made. A cycle that dies after its module is never freed: memory only, no test reads it."""
    yield
    gc.collect()
    gc.freeze()
