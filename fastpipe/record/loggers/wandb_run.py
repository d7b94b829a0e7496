"""logger=wandb: the run as a Weights & Biases run (docs/tracking.md).

Online when an API key is configured (``WANDB_API_KEY`` or ``wandb login``), else offline into
``<run>/wandb/``, with the ``wandb sync`` line printed at the end (``logger.wandb.mode`` or
``WANDB_MODE`` decide otherwise). ``group`` is the sweep, ``job_type`` the group choices that differ
from fastpipe's defaults, ``name`` and ``tags`` the config's (tags cut to W&B's 64 characters); the
config is the composed one, flattened. Window scalars and held-out metrics are logged against
``trainer/step`` (the optimizer step); at the end metrics.json's numbers are the run's summary and the
run folder's files are saved with it. ``train.resume`` continues the same run (its id in trackers.json).
"""
from __future__ import annotations

import shutil
import sys
import uuid
from dataclasses import dataclass
from typing import Dict, List, Optional

from fastpipe.config.logger import WandbLoggerConfig
from fastpipe.record.loggers import RunInfo, numbers, trackers_file

TARGET = "fastpipe.record.loggers.wandb_run.WandbLogger"
FILES = ("graph.txt", "summary.txt", "loss.png", "metrics.json", "metrics.csv", "code.diff", "lr_find.csv", "lr_find.png")
TAG_LIMIT, GROUP_LIMIT, JOB_TYPE_LIMIT = 64, 128, 64  # characters W&B accepts
STEP = "trainer/step"


def tags_for(run: RunInfo) -> List[str]:
    """The config's tags and the job's stage, each within W&B's 64 characters, without repeats."""
    tags = list(run.tags) + ([run.stage] if run.sweep_dir else [])
    return list(dict.fromkeys(t[:TAG_LIMIT] for t in tags if t))


def job_type(choices: Dict[str, str]) -> str:
    """The group choices that differ from fastpipe's defaults (``precision=amp,compile=default``), or
    ``defaults``; within W&B's 64 characters."""
    from fastpipe.config import default_choices

    defaults = default_choices()
    changed = [f"{g}={c}" for g, c in choices.items() if g != "logger" and defaults.get(g) != c]
    return (",".join(changed) or "defaults")[:JOB_TYPE_LIMIT]


def mode_for(configured: Optional[str]) -> str:
    from fastpipe.runtime import tracker_environment

    env = tracker_environment()
    return configured or env["wandb_mode"] or ("online" if env["wandb_api_key"] else "offline")


@dataclass(eq=False)
class WandbLogger(WandbLoggerConfig):
    requires = ("wandb", "fastpipe[wandb]")  # checked before training: config/logger.py
    state_key = "wandb"  # its entry in trackers.json
    writes = "its W&B run (`wandb/`, `trackers.json`)"  # what it leaves in the run folder, as the report says
    working_files = ("wandb",)  # W&B's own folder in the working folder: not project code

    def __post_init__(self) -> None:
        super().__post_init__()
        self.run = None

    def on_start(self, run: RunInfo) -> None:
        import wandb

        mode = mode_for(self.mode)
        kept = trackers_file.read(run.dir).get(self.state_key) or {}
        run_id = kept["id"] if run.resumed and kept.get("id") else uuid.uuid4().hex[:12]
        group = (run.trackers.get(self.state_key) or {}).get("group") or run.sweep_name
        config = {**run.params, "fastpipe.stage": run.stage, "fastpipe.run_dir": str(run.dir),
                  **{f"code.{k}": v for k, v in numbers_or_text(run.code).items()}}
        for name in ("job", "round", "repeat"):
            if getattr(run, name) is not None:
                config[f"fastpipe.{name}"] = getattr(run, name)
        settings = wandb.Settings(console="off", silent=True, init_timeout=self.timeout_s, x_disable_stats=True)
        self.run = wandb.init(project=self.project or run.working_folder.name, entity=self.entity, dir=str(run.dir),
                              id=run_id, resume="allow", name=run.name[:GROUP_LIMIT],
                              group=group[:GROUP_LIMIT] if group else None, job_type=job_type(run.choices),
                              tags=tags_for(run), config=config, mode=mode, settings=settings)
        self.run.define_metric(STEP)
        self.run.define_metric("*", step_metric=STEP)
        trackers_file.remember(run.dir, self.state_key, target=TARGET, id=run_id, mode=mode,
                       sync_dir=str(getattr(self.run.settings, "sync_dir", "") or ""), ended=False, failed=None)

    def on_window(self, run: RunInfo, scalars: Dict[str, float]) -> None:
        self.run.log({**scalars, STEP: run.step})

    def on_eval(self, run: RunInfo, metrics: Dict[str, float]) -> None:
        self.run.log({**metrics, STEP: run.step})

    def on_checkpoint(self, run: RunInfo, path) -> None:
        self.run.summary["checkpoint"] = str(path)

    def on_end(self, run: RunInfo, record: dict) -> None:
        self.run.summary.update({**numbers(record), "status": record.get("status"),
                                 **({"reason": record["reason"]} if record.get("reason") else {})})
        files = self.run.dir  # files copied here are saved with the run (uploaded online, by wandb sync offline)
        for name in FILES:
            if (run.dir / name).is_file():
                shutil.copy2(run.dir / name, files)
        if (run.dir / ".hydra").is_dir():
            shutil.copytree(run.dir / ".hydra", f"{files}/hydra", dirs_exist_ok=True)
        offline = self.run.settings.mode == "offline" or getattr(self.run, "offline", False)
        sync_dir = getattr(self.run.settings, "sync_dir", None)
        self.run.finish(exit_code=0 if record.get("status") == "ok" else 1)
        trackers_file.remember(run.dir, self.state_key, ended=True)
        if offline and sync_dir:
            print(f"fastpipe: W&B ran offline; upload the run with:  wandb sync {sync_dir}", file=sys.stderr, flush=True)


    # ---------------------------------------------------------------- the sweep's process
    @classmethod
    def sweep_start(cls, params: dict, sweep, kept: Optional[dict]) -> dict:
        """W&B has no parent run: the sweep is its jobs' ``group`` (its name)."""
        return {"target": TARGET, "group": (kept or {}).get("group") or sweep.name[:GROUP_LIMIT]}

    @classmethod
    def sweep_end(cls, entry: dict, sweep_dir, result) -> None:
        """Nothing to end: each job's run ends itself."""

    @classmethod
    def sweep_abandoned(cls, entry: dict) -> None:
        """Nothing to end: W&B marks a run whose process died as crashed itself."""


def numbers_or_text(code: Optional[dict], prefix: str = "") -> Dict[str, object]:
    """metrics.json's ``code``, flat (``project.commit``, ``fastpipe.version``, ...)."""
    out: Dict[str, object] = {}
    for name, value in (code or {}).items():
        if isinstance(value, dict):
            out.update(numbers_or_text(value, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = value
    return out
