"""Hydra's own plugin scan finds hydra/launcher=gpus and hydra/sweeper=halving for any Hydra app, not
only for fastpipe's (whose entry point registers them itself): a project's other apps can sweep on them."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

APP = '''
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))  # the project's own modules
import helpers  # noqa: E402
import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402


@hydra.main(version_base="1.3", config_path=None)
def app(cfg):
    print(f"job {HydraConfig.get().job.num}: x={cfg.x} doubled={helpers.double(cfg.x)} in process {os.getpid()}")
    return cfg.x


if __name__ == "__main__":
    print(f"app process {os.getpid()}")
    app()
'''

SCAN = ("from hydra.core.plugins import Plugins; from hydra.plugins.launcher import Launcher; "
        "from hydra.plugins.sweeper import Sweeper; p = Plugins.instance(); "
        "print(sorted(c.__name__ for c in p.discover(Launcher) + p.discover(Sweeper)))")


def installed_env() -> dict:
    """The environment a user's app runs in: without PYTHONPATH when the installed fastpipe is this
    checkout (CI's fresh venv: then the install itself is tested), else with it (this tree by path)."""
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([sys.executable, "-c", "import fastpipe; print(fastpipe.__file__)"], env=bare,
                           cwd="/", capture_output=True, text=True).stdout.strip()
    return bare if where and Path(where).resolve().is_relative_to(REPO.resolve()) else dict(os.environ)


@pytest.mark.slow
def test_another_hydra_app_in_its_own_folder_sweeps_two_jobs_on_the_gpus_launcher(tmp_path):
    (tmp_path / "my_app.py").write_text(APP)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "helpers.py").write_text("def double(x):\n    return 2 * x\n")
    env = installed_env()
    scan = subprocess.run([sys.executable, "-c", SCAN], cwd=tmp_path, env=env, capture_output=True, text=True)
    hint = ("Hydra's plugin scan misses fastpipe's plugins: an editable install made with an older "
            "pyproject.toml? Run the README's install command again")
    assert "'GpusLauncher'" in scan.stdout and "'HalvingSweeper'" in scan.stdout, f"{hint}\n{scan.stdout}{scan.stderr}"
    proc = subprocess.run([sys.executable, "my_app.py", "-m", "+x=1,2", "hydra/launcher=gpus",
                           "hydra.launcher.gpus_per_job=0", "hydra.sweep.dir=sweep"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    app_pid = proc.stdout.split("app process ", 1)[1].split()[0]
    for num, x in ((0, 1), (1, 2)):
        job = tmp_path / "sweep" / str(num)
        line = next(l for l in (job / "output.log").read_text().splitlines() if l.startswith(f"job {num}:"))
        # its own process, which imports what the app imported from the folder it put on sys.path
        assert line.startswith(f"job {num}: x={x} doubled={2 * x} in process ") and not line.endswith(f" {app_pid}")
        assert (job / "launcher.json").is_file() and (job / ".hydra" / "overrides.yaml").is_file()
