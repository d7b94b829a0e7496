"""Fixtures of the unit tier that several packages' tests share."""
from __future__ import annotations

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
