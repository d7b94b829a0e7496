"""A sweep's own tracker runs, made by the sweep's process before its first job starts and ended after its
report (the Hydra callback, fastpipe/report/callbacks.py): for each chosen logger whose class has
``sweep_start`` (MLflow: the experiment and the parent run; W&B: the group), its entry in the sweep
folder's trackers.json, which every job reads as it starts (record/context.py). A sweep process that
exits without its end (a stop signal, Ctrl-C) calls each logger's ``sweep_abandoned``.
"""
from __future__ import annotations

import atexit
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from omegaconf import DictConfig, OmegaConf

from fastpipe.config.logger import hooks_from
from fastpipe.record.loggers import preflight, short_path, trackers_file


@dataclass
class SweepInfo:
    """What a tracker's sweep-level run knows of the sweep."""

    dir: Path
    name: str  # the config's name, else the sweep folder
    tags: List[str] = field(default_factory=list)
    overrides: List[str] = field(default_factory=list)  # the -m command line
    code: Optional[dict] = None
    sweeper: str = ""
    launcher: str = ""
    resume: bool = False  # sweep.resume: continue the sweep folder's runs


def chosen(config: DictConfig) -> list:
    """``(hook, class)`` of each chosen logger that has sweep-level runs."""
    node = config.get("logger")
    node = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else {}
    out = []
    for hook in hooks_from("logger", node).values():
        cls = hook.callable()
        if hasattr(cls, "sweep_start") or hasattr(cls, "preflight"):
            out.append((hook, cls))
    return out


class SweepTrackers:
    """The sweep's tracker entries: ``end(result)`` once its report is written."""

    def __init__(self, sweep_dir: Path, entries: list) -> None:
        self.sweep_dir, self.entries, self.ended = Path(sweep_dir), entries, False
        atexit.register(self.abandon)

    def end(self, result) -> None:
        self.ended = True
        for name, cls, entry in self.entries:
            try:
                cls.sweep_end(entry, self.sweep_dir, result)
                trackers_file.remember(self.sweep_dir, name, ended=True)
            except Exception as exc:  # the tracker is down: the sweep's own results are all in its folder
                print(f"fastpipe: warning: the sweep's {name} run was not ended: {type(exc).__name__}: {exc}",
                      file=sys.stderr, flush=True)

    def abandon(self) -> None:
        if self.ended:
            return
        self.ended = True
        for name, cls, entry in self.entries:
            try:
                cls.sweep_abandoned(entry)
                trackers_file.remember(self.sweep_dir, name, ended=True)
            except Exception:  # exiting anyway: the tracker keeps what it got
                pass


def start_sweep(config: DictConfig, code: Optional[dict] = None) -> Optional[SweepTrackers]:
    """Check the chosen loggers once (package, tracking server) and make their sweep-level runs; raises
    FastpipeError (the sweep is refused before any job starts). None when no logger needs one."""
    trackers = chosen(config)
    for hook, _ in trackers:
        hook.check()
    preflight(hook for hook, _ in trackers)
    trackers = [(hook, cls) for hook, cls in trackers if hasattr(cls, "sweep_start")]
    if not trackers:
        return None
    sweep_dir = Path(str(config.hydra.sweep.dir)).absolute()
    info = SweepInfo(dir=sweep_dir, name=str(config.get("name") or short_path(sweep_dir)),
                     tags=[str(t) for t in config.get("tags") or []],
                     overrides=[str(o) for o in OmegaConf.to_container(config.hydra.overrides.task, resolve=False)],
                     code=code,
                     sweeper=str(OmegaConf.select(config, "hydra.sweeper._target_", default="") or ""),
                     launcher=str(OmegaConf.select(config, "hydra.launcher._target_", default="") or ""),
                     resume=bool(OmegaConf.select(config, "sweep.resume", default=False)))
    kept = trackers_file.read(sweep_dir) if info.resume else {}
    entries = []
    for hook, cls in trackers:
        name = getattr(cls, "state_key", hook.name)
        entry = cls.sweep_start(hook.params, info, kept.get(name))
        trackers_file.remember(sweep_dir, name, **entry)
        entries.append((name, cls, entry))
    return SweepTrackers(sweep_dir, entries)
