"""hydra/launcher=gpus under Hydra's own launcher test suites, run as Hydra's plugins run them."""
import pytest
from hydra.core.plugins import Plugins
from hydra.plugins.launcher import Launcher
from hydra.test_utils.launcher_common_tests import IntegrationTestSuite, LauncherTestSuite

from hydra_plugins.fastpipe_sweeps.gpus_launcher import GpusLauncher

pytestmark = pytest.mark.slow  # every test starts job processes

CPU_LANES = ["hydra.launcher.gpus_per_job=0"]


def test_discovery() -> None:
    assert GpusLauncher.__name__ in [x.__name__ for x in Plugins.instance().discover(Launcher)]


@pytest.mark.parametrize("launcher_name, overrides", [("gpus", CPU_LANES)])
class TestGpusLauncher(LauncherTestSuite):
    pass


@pytest.mark.parametrize("task_launcher_cfg, extra_flags", [
    ({}, ["-m", "hydra/hydra_logging=disabled", "hydra/job_logging=disabled", "hydra/launcher=gpus", *CPU_LANES])])
class TestGpusLauncherIntegration(IntegrationTestSuite):
    pass
