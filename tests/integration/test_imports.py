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


def test_a_single_runs_hydra_process_never_imports_torch(tmp_path):
    """The Hydra process of a run with a fresh training process leaves checking the project's callables
    to that process (launch/launcher.py ``checks_in_trainer``), so it never imports torch; the run trains."""
    from conftest import fastpipe_env

    hooks, said = tmp_path / "hooks", tmp_path / "imported.txt"
    hooks.mkdir()
    # each interpreter that exits normally (the Hydra process; not the spawned trainer) says what it imported
    (hooks / "sitecustomize.py").write_text(
        "import atexit, os, sys\n"
        "atexit.register(lambda: open(os.environ['SAID'], 'a').write(f\"{os.getpid()} {'torch' in sys.modules}\\n\"))\n")
    proc = subprocess.Popen([sys.executable, "-m", "fastpipe", "runtime.progress=false", "train.max_steps=2",
                             "dataset.num_images=64", "train.batch_size=16", f"hydra.run.dir={tmp_path / 'run'}"],
                            cwd=REPO, env=fastpipe_env(hooks, SAID=str(said)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    lines = dict(line.split() for line in said.read_text().splitlines())
    assert lines[str(proc.pid)] == "False", lines
