"""Importing the stages in a fresh interpreter never runs the Hydra app."""
from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_importing_the_stages_never_imports_the_hydra_app():
    """Building loaders, packs or the graph does not run ``@hydra.main`` as a side effect."""
    code = ("import sys; import fastpipe.data, fastpipe.data.mmap, fastpipe.data.pack.cache, fastpipe.pack, "
            "fastpipe.train.graph, fastpipe.train.job, fastpipe.launch.launcher, fastpipe.report.publish; "
            "print('fastpipe.__main__' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"
