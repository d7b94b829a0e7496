"""Importing the stages in a fresh interpreter never runs the Hydra app; a single run is one process."""
from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_importing_the_stages_never_imports_the_hydra_app():
    """Building loaders, packs or the graph does not run ``@hydra.main`` as a side effect."""
    code = ("import sys; import fastpipe.data, fastpipe.data.mmap, fastpipe.data.pack.cache, fastpipe.pack, "
            "fastpipe.train.graph, fastpipe.job.training, fastpipe.launch.dispatch, fastpipe.report.publish; "
            "print('fastpipe.__main__' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_a_single_cpu_run_is_one_process(tmp_path):
    """``python -m fastpipe`` trains in the process the user started: with data.num_workers=0 no other Python
    process starts (each interpreter's start is written down by a sitecustomize hook)."""
    from conftest import fastpipe_env

    hooks, said = tmp_path / "hooks", tmp_path / "started.txt"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "import os\nopen(os.environ['SAID'], 'a').write(f'{os.getpid()} {os.getppid()}\\n')\n")
    proc = subprocess.run([sys.executable, "-m", "fastpipe", "runtime.progress=false", "train.max_steps=2",
                           "dataset.num_images=64", "train.batch_size=16", "data.num_workers=0", "logger=none",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=REPO, env=fastpipe_env(hooks, SAID=str(said)),
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(said.read_text().splitlines()) == 1, said.read_text()  # this one interpreter, no other
