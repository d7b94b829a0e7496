"""The plugins' settings (``hydra.launcher.*``, ``hydra.sweeper.*``), registered in Hydra's ConfigStore
as the choices ``hydra/launcher=gpus``, ``hydra/sweeper=halving``, ``hydra/sweeper=race`` and
``hydra/sweeper=autotune``.

No ``from __future__ import annotations`` in this package's scanned modules: Hydra's plugin scanner
runs a module before it is in ``sys.modules``, where dataclasses cannot resolve string annotations."""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class GpusLauncherConf:
    _target_: str = "hydra_plugins.fastpipe_sweeps.gpus_launcher.GpusLauncher"
    # GPUs each job sees (its CUDA_VISIBLE_DEVICES); launcher=ddp jobs take several. 0 = jobs on the CPU;
    # null = 1 where the sweep sees GPUs, 0 where it sees none. Above 0 with no GPU visible is refused.
    gpus_per_job: Optional[int] = None
    # Jobs at once; null = as many as the GPUs allow (visible GPUs // gpus_per_job), 1 without GPUs.
    # On a CPU it may be raised up to one job per core: the cores are shared out among the jobs.
    max_parallel: Optional[int] = None


@dataclass
class HalvingSweeperConf:
    _target_: str = "hydra_plugins.fastpipe_sweeps.halving_sweeper.HalvingSweeper"
    probe_steps: int = 30  # steady-state steps of a round-1 probe (added to measure.warmup_steps)
    keep: float = 0.5  # share of the probes kept each round; the next round's probes are 1/keep longer
    finalists: int = 2  # combinations trained at full length besides the baseline
    # TORCHINDUCTOR_CACHE_DIR for every probe and full run; null = Inductor's default (one per user and
    # machine, so a probe's compiled kernels serve its full run on the same machine). Give a folder all
    # the jobs can reach, e.g. '${hydra.sweep.dir}/inductor-cache', when jobs run on different machines.
    inductor_cache: Optional[str] = None
    params: Optional[Dict[str, str]] = None  # hydra.sweeper.params, as for the basic sweeper (+sweep= presets)
    # report.objective=time_to_target: round 1's training-clock budget in seconds (each next round's is
    # 1/keep times longer); null = from the baseline, which trains first: the last round's budget is its
    # time to the target, each earlier one keep times the next (docs/sweeps.md).
    budget_s: Optional[float] = None
    # report.objective=time_to_target: the finalists (with the baseline) are raced over at most this many
    # seeds before a winner is named (hydra/sweeper=race's test, docs/time-to-target.md); 0 = no race: the
    # leader is then untested, and no winner is named nor best.yaml written.
    finalist_rounds: int = 10


@dataclass
class RaceSweeperConf:
    _target_: str = "hydra_plugins.fastpipe_sweeps.race_sweeper.RaceSweeper"
    # seeds every configuration trains before the first test; null = the fewest that can send one out
    # (6 for two configurations at alpha 0.05 over 10 rounds, 8 for four: docs/time-to-target.md)
    min_rounds: Optional[int] = None
    max_rounds: int = 10  # seeds at most (the race's looks); the configurations still in the race then tie
    # the chance, over the whole race, of sending out a configuration no worse than the best (and so of
    # naming a winner among identical ones): each pair's sign test, Pocock over the looks, Bonferroni over pairs
    alpha: float = 0.05
    # A round's cap: this many times the leader's median training-clock time to target, once the leader
    # reached the target in cap_after rounds; a run past it stops (train.time_budget_s) and counts as a
    # miss for its seed. null = no cap.
    cap: Optional[float] = 2.0
    cap_after: int = 3
    max_wall_s: Optional[float] = None  # stop racing after this many seconds of rounds; null = no limit
    params: Optional[Dict[str, str]] = None  # hydra.sweeper.params, as for the basic sweeper (+sweep= presets)


@dataclass
class AutotuneSweeperConf:
    _target_: str = "hydra_plugins.fastpipe_sweeps.autotune_sweeper.AutotuneSweeper"
    # runs of each trial by throughput (report.repeats): a change wins when all its runs beat the current best's
    repeats: int = 3
    max_wall_s: Optional[float] = None  # stop climbing after this many seconds; null = no limit
    max_trials: int = 20  # jobs at most, the baseline's included (a race counts as one)
    # key -> comma-separated values: a group or key of the bound table limited to these values, or a key added
    # (tried for every bound); null = the bound table alone (docs/autotune.md). Untyped, so that the command
    # line can give the whole dict: 'hydra.sweeper.space={compile: "default,max-autotune"}'
    space: Any = None
    fixed: List[str] = field(default_factory=list)  # keys autotune leaves as the project gives them
    # report.objective=time_to_target: each candidate is raced against the current best with these
    # hydra/sweeper=race settings (min_rounds, max_rounds, alpha, cap, cap_after, max_wall_s)
    race: Dict[str, Any] = field(default_factory=dict)
    params: Optional[Dict[str, str]] = None  # as for the basic sweeper: a list in it is refused (one configuration)


ConfigStore.instance().store(group="hydra/launcher", name="gpus", node=GpusLauncherConf, provider="fastpipe")
ConfigStore.instance().store(group="hydra/sweeper", name="halving", node=HalvingSweeperConf, provider="fastpipe")
ConfigStore.instance().store(group="hydra/sweeper", name="race", node=RaceSweeperConf, provider="fastpipe")
ConfigStore.instance().store(group="hydra/sweeper", name="autotune", node=AutotuneSweeperConf, provider="fastpipe")
