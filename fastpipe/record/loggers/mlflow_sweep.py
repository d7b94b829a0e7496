"""A sweep in MLflow: one parent run, its jobs' runs nested under it (mlflow_run.py), made and ended by
the sweep's own process (the Hydra callback: record/loggers/sweep.py).

The sweep process creates the experiment (and, for a sqlite store, its schema) and the parent run
before any job starts, so parallel jobs (hydra/launcher=gpus, Slurm) never race on them. At the sweep's
end: report.md, report.csv, report.png and best.yaml as the parent's artifacts, the winner's runs
tagged ``fastpipe.winner=true``, every nested run still RUNNING ended (FAILED with its record's reason
when the job failed, else KILLED), and the parent FINISHED. A sweep that ends without its report (a
stop signal, Ctrl-C) leaves its parent and still-running jobs KILLED.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from fastpipe.record import results
from fastpipe.record.loggers import mlflow_common as common
from fastpipe.record.loggers import trackers_file

REPORT_FILES = ("report.md", "report.csv", "report.png", "best.yaml")


def start(params: dict, sweep, kept: Optional[dict]) -> dict:
    """Experiment and parent run of ``sweep`` (record/loggers/sweep.py's SweepInfo); ``kept``: the entry of
    an earlier run of this sweep folder (sweep.resume continues its parent run)."""
    timeout = float(params.get("timeout_s") or 5.0)
    uri = common.tracking_uri(params.get("tracking_uri"))
    mlflow_client = common.client(uri, timeout)
    if kept and kept.get("tracking_uri") == uri and kept.get("parent_run_id"):
        mlflow_client.update_run(kept["parent_run_id"], status="RUNNING")
        return {**kept, "ended": False}
    experiment_id = common.ensure_experiment(mlflow_client, params.get("experiment") or Path.cwd().name)
    tags = {"fastpipe.stage": "sweep", "fastpipe.sweep_dir": str(sweep.dir), **common.user_tags(sweep.tags),
            **common.code_tags(sweep.code)}
    parent = mlflow_client.create_run(experiment_id, run_name=sweep.name, tags=tags).info.run_id
    common.log_params(mlflow_client, parent, {"overrides": " ".join(sweep.overrides), "sweeper": sweep.sweeper,
                                              "launcher": sweep.launcher})
    return {"target": "fastpipe.record.loggers.mlflow_run.MlflowLogger", "tracking_uri": uri,
            "experiment_id": experiment_id, "parent_run_id": parent, "ended": False}


def _job_run_ids(job_dir: Path):
    """The MLflow runs of a job folder: its own, or each repeat's (repeat-K/)."""
    for folder in [Path(job_dir)] + sorted(Path(job_dir).glob("repeat-*")):
        entry = trackers_file.read(folder).get("mlflow") or {}
        if entry.get("run_id"):
            yield entry["run_id"]


def _end_unfinished(mlflow_client, entry: dict) -> None:
    """Every nested run still RUNNING ends as its job's record says (FAILED with the reason, ...), KILLED
    when the job recorded no outcome (its process was killed)."""
    for run in common.run_ids(mlflow_client, entry["experiment_id"], entry["parent_run_id"], status="RUNNING"):
        folder = run.data.tags.get("fastpipe.run_dir")
        record = (results.read(Path(folder)) if folder else None) or {}
        if record.get("run_id") != run.data.tags.get("fastpipe.run_id") or record.get("status") in (None, "running"):
            record = {"status": "interrupted", "reason": "the job's process ended before it recorded an outcome"}
        common.end_run(mlflow_client, run.info.run_id, record)


def end_sweep(entry: dict, sweep_dir: Path, result) -> None:
    """The sweep's report as the parent's artifacts, the winner tagged, every run ended."""
    mlflow_client = common.client(entry["tracking_uri"], 5.0)
    parent = entry["parent_run_id"]
    for name in REPORT_FILES:
        if (Path(sweep_dir) / name).is_file():
            mlflow_client.log_artifact(parent, str(Path(sweep_dir) / name))
    best = getattr(result, "best", None)
    if best is not None:
        for run_id in _job_run_ids(Path(best["dir"])):
            mlflow_client.set_tag(run_id, "fastpipe.winner", "true")
        mlflow_client.set_tag(parent, "fastpipe.winner_job", str(best["job"]))
    _end_unfinished(mlflow_client, entry)
    mlflow_client.set_terminated(parent, status="FINISHED")


def abandoned(entry: dict) -> None:
    """The sweep process exits without its end (a stop signal, Ctrl-C, a crash): KILLED, parent and jobs."""
    mlflow_client = common.client(entry["tracking_uri"], 5.0)
    _end_unfinished(mlflow_client, entry)
    mlflow_client.set_terminated(entry["parent_run_id"], status="KILLED")
