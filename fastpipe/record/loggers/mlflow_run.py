"""logger=mlflow: the run as an MLflow run (docs/tracking.md).

At the start: the run (a sweep's job: nested under the sweep's parent run, tagged with its stage), its
tags (name, tags, stage, job, the code's commits) and params (the composed config, flattened, every
group choice). At each window edge and evaluation: its scalars as metrics at the optimizer step. At the
end: metrics.json's numbers as metrics, graph.txt, summary.txt, loss.png, metrics.json, metrics.csv, code.diff,
lr_find.csv/png and ``.hydra/`` as artifacts, and its status (FINISHED, FAILED with the reason, KILLED when stopped). The
run's id is kept in the run folder's trackers.json: ``train.resume`` continues the same MLflow run.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

from fastpipe.config.logger import MlflowLoggerConfig
from fastpipe.record.loggers import RunInfo, numbers, trackers_file
from fastpipe.record.loggers import mlflow_common as common

ARTIFACT_FILES = ("graph.txt", "summary.txt", "loss.png", "metrics.json", "metrics.csv", "code.diff", "lr_find.csv",
                  "lr_find.png")
TARGET = "fastpipe.record.loggers.mlflow_run.MlflowLogger"


def run_tags(run: RunInfo, parent: Optional[str]) -> Dict[str, str]:
    tags = {"fastpipe.stage": run.stage, "fastpipe.run_dir": str(run.dir), "fastpipe.run_id": run.run_id,
            "fastpipe.overrides": " ".join(run.overrides)[:common.TAG_LIMIT],
            **common.user_tags(run.tags), **common.code_tags(run.code)}
    for name, value in (("job", run.job), ("round", run.round), ("repeat", run.repeat), ("sweep_dir", run.sweep_dir)):
        if value is not None:
            tags[f"fastpipe.{name}"] = str(value)
    if parent:
        tags["mlflow.parentRunId"] = parent
    return tags


@dataclass(eq=False)
class MlflowLogger(MlflowLoggerConfig):
    requires = ("mlflow", "fastpipe[mlflow]")  # checked before training: config/logger.py
    state_key = "mlflow"  # its entry in trackers.json
    writes = "its MLflow run (`trackers.json` says where)"  # what it leaves in the run folder, as the report says
    working_files = ("mlflow.db", "mlruns", "mlartifacts")  # MLflow's own, in the working folder: not project code

    def __post_init__(self) -> None:
        super().__post_init__()
        self.client, self.run_id = None, None

    def on_start(self, run: RunInfo) -> None:
        uri = common.tracking_uri(self.tracking_uri)
        self.client = common.client(uri, self.timeout_s)
        sweep = run.trackers.get(self.state_key) or {}
        if sweep.get("tracking_uri") != uri:  # the sweep's parent lives elsewhere: a run of its own
            sweep = {}
        kept = trackers_file.read(run.dir).get(self.state_key) or {}
        tags = run_tags(run, sweep.get("parent_run_id"))
        if run.resumed and kept.get("run_id") and kept.get("tracking_uri") == uri:
            self.run_id = kept["run_id"]  # train.resume: the same MLflow run goes on
            self.client.update_run(self.run_id, status="RUNNING")
            common.log_tags(self.client, self.run_id, tags)
            logged = set(self.client.get_run(self.run_id).data.params)  # params are immutable: add new ones only
            experiment_id = kept.get("experiment_id")
        else:
            experiment_id = sweep.get("experiment_id") or common.ensure_experiment(
                self.client, self.experiment or run.working_folder.name)
            self.run_id = self.client.create_run(experiment_id, run_name=run.name, tags=tags).info.run_id
            logged = set()
        trackers_file.remember(run.dir, self.state_key, target=TARGET, tracking_uri=uri, experiment_id=experiment_id,
                       run_id=self.run_id, ended=False, failed=None, artifacts=self.artifacts)
        common.log_params(self.client, self.run_id, run.params, skip=logged)

    def _metrics(self, run: RunInfo, values: Dict[str, float]) -> None:
        common.log_metrics(self.client, self.run_id, values, run.step, int(time.time() * 1000))

    def on_window(self, run: RunInfo, scalars: Dict[str, float]) -> None:
        self._metrics(run, scalars)

    def on_eval(self, run: RunInfo, metrics: Dict[str, float]) -> None:
        self._metrics(run, metrics)

    def on_checkpoint(self, run: RunInfo, path) -> None:
        self.client.set_tag(self.run_id, "fastpipe.checkpoint", str(path))

    def on_end(self, run: RunInfo, record: dict) -> None:
        _finish(self.client, self.run_id, run.dir, record, run.step, self.artifacts)
        trackers_file.remember(run.dir, self.state_key, ended=True)

    # ---------------------------------------------------------------- the process that launched the run
    @classmethod
    def settle(cls, entry: dict, record: dict, run_dir: Path) -> None:
        """End the run its trainer left RUNNING (killed before its end, even after writing its results):
        the record's numbers and the run folder's files, which the trainer may not have sent, then the
        launch's outcome, its warnings as a tag."""
        mlflow_client = common.client(entry["tracking_uri"], 5.0)
        if mlflow_client.get_run(entry["run_id"]).info.status != "RUNNING":
            return
        if record.get("warnings"):
            common.log_tags(mlflow_client, entry["run_id"], {"fastpipe.warnings": " | ".join(record["warnings"])})
        _finish(mlflow_client, entry["run_id"], Path(run_dir), record, record.get("steps") or 0,
                entry.get("artifacts", True))

    @classmethod
    def preflight(cls, params: dict) -> None:
        common.preflight(common.tracking_uri(params.get("tracking_uri")), float(params.get("timeout_s") or 5.0))

    @classmethod
    def sweep_start(cls, params: dict, sweep, kept: Optional[dict]) -> dict:
        from fastpipe.record.loggers import mlflow_sweep

        return mlflow_sweep.start(params, sweep, kept)

    @classmethod
    def sweep_end(cls, entry: dict, sweep_dir: Path, result) -> None:
        from fastpipe.record.loggers import mlflow_sweep

        mlflow_sweep.end_sweep(entry, sweep_dir, result)

    @classmethod
    def sweep_abandoned(cls, entry: dict) -> None:
        from fastpipe.record.loggers import mlflow_sweep

        mlflow_sweep.abandoned(entry)


def _finish(mlflow_client, run_id: str, run_dir: Path, record: dict, step: int, artifacts: bool) -> None:
    """The run's end: metrics.json's numbers as metrics, the run folder's files as artifacts, its status."""
    common.log_metrics(mlflow_client, run_id, numbers(record), step, int(time.time() * 1000))
    if artifacts:
        for name in ARTIFACT_FILES:
            if (run_dir / name).is_file():
                mlflow_client.log_artifact(run_id, str(run_dir / name))
        if (run_dir / ".hydra").is_dir():
            mlflow_client.log_artifacts(run_id, str(run_dir / ".hydra"), artifact_path=".hydra")
    common.end_run(mlflow_client, run_id, record)
