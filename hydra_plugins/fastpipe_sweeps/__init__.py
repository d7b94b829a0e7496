"""fastpipe's Hydra plugins, found by Hydra's plugin scan in the ``hydra_plugins`` namespace package.

- ``hydra/launcher=gpus``: a sweep's jobs run concurrently, each in a fresh process pinned to its
  own GPU(s) and share of the CPU cores (gpus_launcher.py);
- ``hydra/sweeper=halving``: successive halving on measured throughput or time to target (halving_sweeper.py);
- ``hydra/sweeper=race``: configurations raced over seeds by time to target (race_sweeper.py);
- ``hydra/sweeper=autotune``: the project's configuration climbed to its fastest, one proven change at a
  time (autotune_sweeper.py).

Their settings and defaults are the dataclasses in config.py; docs/sweeps.md explains them.
"""


def register() -> None:
    """Make ``hydra/launcher=gpus``, ``hydra/sweeper=halving``, ``race`` and ``autotune`` known to Hydra even where its plugin
    scan cannot list this package: an install behind an import hook (such as an editable install made
    with an older pyproject.toml, whose hook Python's ``pkgutil`` cannot list). Installs made from this
    pyproject.toml, editable or not, are found by the scan itself, for any Hydra app. Idempotent;
    fastpipe calls it before composing."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.fastpipe_sweeps import config  # noqa: F401  (the ConfigStore entries)
    from hydra_plugins.fastpipe_sweeps.gpus_launcher import GpusLauncher
    from hydra_plugins.fastpipe_sweeps.halving_sweeper import HalvingSweeper
    from hydra_plugins.fastpipe_sweeps.autotune_sweeper import AutotuneSweeper
    from hydra_plugins.fastpipe_sweeps.race_sweeper import RaceSweeper

    plugins = Plugins.instance()
    for clazz in (GpusLauncher, HalvingSweeper, RaceSweeper, AutotuneSweeper):
        if f"{clazz.__module__}.{clazz.__name__}" not in plugins.class_name_to_class:
            plugins.register(clazz)
