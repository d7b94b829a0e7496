"""hydra/launcher=gpus under Hydra's own launcher test suites, run as Hydra's plugins run them."""
import pytest
from hydra.core.plugins import Plugins
from hydra.plugins.launcher import Launcher
from hydra.test_utils.launcher_common_tests import IntegrationTestSuite, LauncherTestSuite

from hydra_plugins.fastpipe_sweeps.gpus_launcher import GpusLauncher

pytestmark = pytest.mark.slow  # every test starts job processes

CPU_LANES = ["hydra.launcher.gpus_per_job=0"]


@pytest.fixture(autouse=True)
def hydra_default_version_base():
    """The suites assume Hydra's default version_base (1.1: a job runs in its folder), as in Hydra's own
    test runs; importing fastpipe's entry point (@hydra.main(version_base="1.3")) in an earlier test of
    this process sets it process-wide. The previous value comes back afterwards."""
    from hydra.version import VersionBase, __compat_version__

    previous = VersionBase.instance().getbase()
    VersionBase.instance().setbase(__compat_version__)
    yield
    VersionBase.instance().version_base = previous


def test_discovery() -> None:
    assert GpusLauncher.__name__ in [x.__name__ for x in Plugins.instance().discover(Launcher)]


@pytest.mark.parametrize("launcher_name, overrides", [("gpus", CPU_LANES)])
class TestGpusLauncher(LauncherTestSuite):
    pass


@pytest.mark.parametrize("task_launcher_cfg, extra_flags", [
    ({}, ["-m", "hydra/hydra_logging=disabled", "hydra/job_logging=disabled", "hydra/launcher=gpus", *CPU_LANES])])
class TestGpusLauncherIntegration(IntegrationTestSuite):
    pass
