"""hydra/launcher=gpus under Hydra's own launcher test suites, run as Hydra's plugins run them."""
import os

import pytest
from hydra.core.plugins import Plugins
from hydra.plugins.launcher import Launcher
from hydra.test_utils.launcher_common_tests import IntegrationTestSuite, LauncherTestSuite

from hydra_plugins.fastpipe_sweeps.gpus_launcher import GpusLauncher

pytestmark = pytest.mark.slow  # every test starts job processes

# Jobs on the CPU, two at a time where the machine has two cores (Hydra's joblib launcher runs its jobs at once too)
CPU_LANES = ["hydra.launcher.gpus_per_job=0", f"hydra.launcher.max_parallel={min(2, len(os.sched_getaffinity(0)))}"]


@pytest.fixture(autouse=True)
def hydra_state_as_a_fresh_process_has_it():
    """The suites assume Hydra's state as at a process's start, as in Hydra's own test runs: its default
    version_base (1.1: a job runs in its folder) and only Hydra's own entries in the ConfigStore.
    Earlier tests of this process change both (importing fastpipe's entry point sets version_base 1.3;
    test modules register schemas, whose modules each job process would then import to restore
    them). Both come back afterwards."""
    from hydra.core.config_store import ConfigStore
    from hydra.version import VersionBase, __compat_version__

    repo, version_base = ConfigStore.instance().repo, VersionBase.instance().getbase()
    ConfigStore.instance().repo = {k: v for k, v in repo.items() if k in ("hydra", "_dummy_empty_config_.yaml")}
    VersionBase.instance().setbase(__compat_version__)
    yield
    ConfigStore.instance().repo = repo
    VersionBase.instance().version_base = version_base


def test_discovery() -> None:
    assert GpusLauncher.__name__ in [x.__name__ for x in Plugins.instance().discover(Launcher)]


@pytest.mark.parametrize("launcher_name, overrides", [("gpus", CPU_LANES)])
class TestGpusLauncher(LauncherTestSuite):
    pass


@pytest.mark.parametrize("task_launcher_cfg, extra_flags", [
    ({}, ["-m", "hydra/hydra_logging=disabled", "hydra/job_logging=disabled", "hydra/launcher=gpus", *CPU_LANES])])
class TestGpusLauncherIntegration(IntegrationTestSuite):
    pass
