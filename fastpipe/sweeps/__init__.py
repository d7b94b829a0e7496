"""Sweeps beyond Hydra's basic grid: the logic behind fastpipe's Hydra plugins (docs/sweeps.md).

- ``race/``: racing configurations over seeds (``hydra/sweeper=race``): its plan and ``race.json``, its
  statistics, its rounds;
- ``halving/``: successive halving (``hydra/sweeper=halving``): its plan and ``halving.json``, the rounds
  by throughput (probes) and by time to target (budgets, then the contenders raced);
- ``slots``: how the ``gpus`` launcher shares a machine's GPUs and CPU cores among concurrent jobs;
- ``objective``: the single number a job hands to an optimising sweeper (Optuna);
- ``check``: every job of a sweep checked before the first starts; ``job_place``: a job's place in its sweep.

The plugins themselves (the Launcher and Sweeper classes Hydra instantiates, and their ConfigStore
entries) live in the ``hydra_plugins.fastpipe_sweeps`` namespace package, where Hydra finds them: each
a thin class that hands the grid and a way to launch a batch to the logic here. Nothing here reads the
environment or starts processes.
"""
