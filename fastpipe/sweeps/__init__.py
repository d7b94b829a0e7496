"""Sweeps beyond Hydra's basic grid: the logic behind fastpipe's Hydra plugins (docs/sweeps.md).

- ``slots``: how the ``gpus`` launcher shares a machine's GPUs and CPU cores among concurrent jobs;
- ``halving``: successive halving on measured throughput, the ``halving`` sweeper's plan and its
  record (``halving.json`` in the sweep folder, read by the report);
- ``objective``: the single number a job hands to an optimising sweeper (Optuna).

The plugins themselves (the Launcher and Sweeper classes Hydra instantiates, and their ConfigStore
entries) live in the ``hydra_plugins.fastpipe_sweeps`` namespace package, where Hydra finds them.
Nothing here reads the environment or starts processes.
"""
