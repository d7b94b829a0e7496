"""What a run's MLflow logger and a sweep's MLflow parent share: the tracking URI, a client with bounded
HTTP retries, the experiment, names MLflow accepts, tags and the statuses runs end with."""
from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from fastpipe.errors import EnvironmentProblem

# metrics.json's status -> the MLflow run's: a stopped or interrupted run is KILLED.
STATUS = {"ok": "FINISHED", "failed": "FAILED", "preempted": "KILLED", "interrupted": "KILLED", "running": "KILLED"}
BATCH = 100  # params per log_batch (MLflow's own limit)
PARAM_LIMIT, TAG_LIMIT = 6000, 8000  # value lengths MLflow stores
_BAD_NAME = re.compile(r"[^A-Za-z0-9_\-. /]")  # what MLflow refuses in a key


def tracking_uri(configured: Optional[str]) -> str:
    """``configured``, else $MLFLOW_TRACKING_URI, else ``sqlite:///<working folder>/mlflow.db`` (MLflow's own
    default, made absolute so that every process of a run and sweep uses the same file)."""
    from fastpipe.runtime import tracker_environment

    uri = configured or tracker_environment()["mlflow_tracking_uri"]
    return uri or f"sqlite:///{(Path.cwd() / 'mlflow.db').absolute()}"


def client(uri: str, timeout_s: float):
    from fastpipe.runtime import bound_tracker_requests

    bound_tracker_requests(timeout_s)
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def key(name: str) -> str:
    """A param, metric or tag key MLflow accepts (other characters become ``_``; 250 at most)."""
    return _BAD_NAME.sub("_", str(name))[:250]


def ensure_experiment(mlflow_client, name: str) -> str:
    """The id of experiment ``name``, created when missing (by another process meanwhile: found again)."""
    from mlflow.exceptions import MlflowException

    experiment = mlflow_client.get_experiment_by_name(name)
    if experiment is None:
        try:
            return mlflow_client.create_experiment(name)
        except MlflowException:
            experiment = mlflow_client.get_experiment_by_name(name)
            if experiment is None:
                raise
    if experiment.lifecycle_stage == "deleted":
        raise EnvironmentProblem(f"the MLflow experiment {name!r} was deleted; restore it (mlflow experiments restore "
                                 f"--experiment-id {experiment.experiment_id}) or set logger.mlflow.experiment=NAME")
    return experiment.experiment_id


def log_params(mlflow_client, run_id: str, params: Dict[str, object], skip: Iterable[str] = ()) -> None:
    from mlflow.entities import Param

    from fastpipe.config.run_context import param_text

    skip = set(skip)
    items = [Param(key(k), param_text(v)[:PARAM_LIMIT]) for k, v in params.items() if key(k) not in skip]
    for start in range(0, len(items), BATCH):
        mlflow_client.log_batch(run_id, params=items[start:start + BATCH])


def log_tags(mlflow_client, run_id: str, tags: Dict[str, str]) -> None:
    from mlflow.entities import RunTag

    items = [RunTag(key(k), str(v)[:TAG_LIMIT]) for k, v in tags.items()]
    for start in range(0, len(items), BATCH):
        mlflow_client.log_batch(run_id, tags=items[start:start + BATCH])


def log_metrics(mlflow_client, run_id: str, values: Dict[str, float], step: int, timestamp_ms: int) -> None:
    from mlflow.entities import Metric

    items = [Metric(key(k), float(v), timestamp_ms, step) for k, v in values.items()
             if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    for start in range(0, len(items), 1000):
        mlflow_client.log_batch(run_id, metrics=items[start:start + 1000])


def code_tags(code: Optional[dict]) -> Dict[str, str]:
    """metrics.json's ``code`` as tags, the project's commit under MLflow's own git tags."""
    if not code:
        return {}
    project, fp = code.get("project"), code.get("fastpipe") or {}
    tags = {"fastpipe.version": str(fp.get("version")), "fastpipe.commit": str(fp.get("commit"))}
    if project is None:
        return {**tags, "fastpipe.code": "not a git repository"}
    tags.update({"mlflow.source.git.commit": str(project.get("commit")), "fastpipe.code.dirty": str(project["dirty"]).lower(),
                 "fastpipe.code.diff_sha256": str(project.get("diff_sha256"))})
    if project.get("branch"):
        tags["mlflow.source.git.branch"] = project["branch"]
    return tags


def user_tags(tags: Iterable[str]) -> Dict[str, str]:
    """The config's tags, each a tag of its own (``true``), and all of them in ``fastpipe.tags``."""
    tags = list(tags)
    return {**{key(t): "true" for t in tags}, **({"fastpipe.tags": ", ".join(tags)[:TAG_LIMIT]} if tags else {})}


PROBE = "/api/2.0/mlflow/experiments/get-by-name?experiment_name=Default"  # a GET every MLflow server answers in JSON


def server_problem(uri: str, timeout_s: float) -> Optional[str]:
    """None when an MLflow tracking server answers at ``uri``, else the one line saying why not: nothing
    answers, or something that is not MLflow does (its answer to an MLflow REST call is not MLflow's JSON:
    an experiment, or an ``error_code``). A 401/403 passes: MLflow's client sends the credentials."""
    fix = "fix logger.mlflow.tracking_uri (or MLFLOW_TRACKING_URI), or choose another logger"
    try:
        with urllib.request.urlopen(uri.rstrip("/") + PROBE, timeout=timeout_s) as answer:
            status, body = answer.status, answer.read(4096)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return None
        status, body = exc.code, exc.read(4096)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return (f"the MLflow tracking server at {uri} cannot be reached ({type(reason).__name__}: {reason}); start "
                f"it (mlflow server --host HOST --port PORT), {fix}")
    try:
        said = json.loads(body)
    except ValueError:
        said = None
    if isinstance(said, dict) and ("experiment" in said or "error_code" in said):
        return None
    return (f"{uri} answers, but not as an MLflow tracking server (GET {PROBE.split('?')[0]} gave HTTP {status}, "
            f"{'not JSON' if said is None else 'other JSON'}); {fix}")


def preflight(uri: str, timeout_s: float) -> None:
    """One line naming the address and the fix when ``uri`` cannot work, before any training."""
    from fastpipe.runtime import tracker_environment

    if uri.startswith(("http://", "https://")):
        problem = server_problem(uri, timeout_s)
        if problem is not None:
            raise EnvironmentProblem(problem)
    elif uri.startswith("sqlite:///"):
        folder = Path(uri[len("sqlite:///"):]).parent
        if not folder.is_dir():
            raise EnvironmentProblem(f"logger.mlflow.tracking_uri={uri}: the folder {folder} does not exist; create it "
                                     "or give another sqlite:///PATH")
    elif (urllib.parse.urlparse(uri).scheme in ("", "file") and not uri.startswith("databricks")
          and not tracker_environment()["mlflow_allow_file_store"]):
        raise EnvironmentProblem(f"logger.mlflow.tracking_uri={uri} is MLflow's file store, which MLflow 3 refuses; "
                                 "use sqlite:///mlflow.db (the default), a tracking server, or set "
                                 "MLFLOW_ALLOW_FILE_STORE=true")


def run_ids(mlflow_client, experiment_id: str, parent_run_id: str, status: Optional[str] = None) -> List:
    """The nested runs of ``parent_run_id`` (those with ``status``, when given)."""
    query = f"tags.mlflow.parentRunId = '{parent_run_id}'" + (f" and attributes.status = '{status}'" if status else "")
    return list(mlflow_client.search_runs([experiment_id], filter_string=query, max_results=5000))


def end_run(mlflow_client, run_id: str, record: dict) -> None:
    """The run's status from metrics.json's (FAILED with the reason as a tag, KILLED when stopped)."""
    status = record.get("status") or "failed"
    tags = {"fastpipe.status": status}
    if status != "ok" and record.get("reason"):
        tags["fastpipe.reason"] = str(record["reason"])
    log_tags(mlflow_client, run_id, tags)
    mlflow_client.set_terminated(run_id, status=STATUS.get(status, "FAILED"))
