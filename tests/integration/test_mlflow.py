"""logger=mlflow against a real MLflow tracking server (``mlflow server`` on 127.0.0.1, a free port, a sqlite
store in the test's folder), started once for this module and stopped at its end; everything is read
back through ``MlflowClient``. The last test kills the server mid-run."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import TINY, compose, in_process, make_settings, run_sweep

# Found, not imported, here: collecting this module (the fast tier collects it too) must not import MLflow.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(importlib.util.find_spec("mlflow") is None,
                                                   reason='MLflow is not installed: pip install "fastpipe[mlflow]"')]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``http://127.0.0.1:PORT`` of a tracking server of its own (job execution off: one worker process)."""
    import urllib.request

    folder = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    log = open(folder / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--workers", "1", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
                             "--artifacts-destination", str(folder / "artifacts")],
                            cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while True:
        try:
            urllib.request.urlopen(uri + "/health", timeout=2).close()
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                log.close()
                pytest.fail("mlflow server did not start: " + (folder / "server.log").read_text()[-3000:])
            time.sleep(0.5)
    yield uri, proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    log.close()


def tensorboard_scalars(folder: Path) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def client(uri):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def runs_of(uri, experiment: str):
    c = client(uri)
    exp = c.get_experiment_by_name(experiment)
    assert exp is not None, f"no experiment {experiment!r}"
    return c, exp, c.search_runs([exp.experiment_id], max_results=100)


# ------------------------------------------------------------------ a parallel sweep, one job killed
@pytest.fixture(scope="module")
def sweep(server, tmp_path_factory):
    uri, _ = server
    sweep_dir = tmp_path_factory.mktemp("mlflow-sweep") / "sweep"
    # Jobs 0 (fast) and 1 (slow: a winner one run each can name) train in parallel (two CPU lanes, each job in
    # its lane's process); job 2's process is SIGKILLed at its third step, once its MLflow run exists. The
    # sweep itself runs in this process.
    args = ["hydra/launcher=gpus", "hydra.launcher.max_parallel=2",
            "model._target_=fault_models.KilledAt", "+model.mode=fast,slow,killed",
            "+model.wait_for=${hydra:runtime.output_dir}/trackers.json", "logger=[tensorboard,mlflow]",
            f"logger.mlflow.tracking_uri={uri}", "logger.mlflow.experiment=sweeps", "name=lanes", "tags=[ci,cpu]",
            "train.eval_every=6", *TINY]
    proc = run_sweep(sweep_dir, args)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return uri, sweep_dir, proc


def test_a_sweep_is_a_parent_run_with_a_nested_run_per_job(sweep):
    uri, sweep_dir, _ = sweep
    c, exp, runs = runs_of(uri, "sweeps")
    parents = [r for r in runs if r.data.tags.get("fastpipe.stage") == "sweep"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED" and parents[0].info.run_name == "lanes"
    parent = parents[0]
    jobs = {int(r.data.tags["fastpipe.job"]): r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert sorted(jobs) == [0, 1, 2]
    assert [r.info.run_name for _, r in sorted(jobs.items())] == ["lanes #0", "lanes #1", "lanes #2"]
    for num in (0, 1):
        run = jobs[num]
        assert run.info.status == "FINISHED", (num, run.info.status, run.data.tags.get("fastpipe.reason"))
        assert run.data.tags["fastpipe.stage"] == "job" and run.data.tags["ci"] == "true"
        params = run.data.params
        assert params["train.max_steps"] == "12" and params["choices.logger"] == "[tensorboard,mlflow]"
        assert params["model.mode"] == ("fast", "slow")[num] and params["choices.precision"] == "fp32"
        record = json.loads((sweep_dir / str(num) / "metrics.json").read_text())
        code = record["code"]
        assert run.data.tags["mlflow.source.git.commit"] == str((code["project"] or {}).get("commit"))
        assert run.data.tags["fastpipe.run_dir"] == str((sweep_dir / str(num)).absolute())
        tb = tensorboard_scalars(sweep_dir / str(num) / "tb")
        for tag in ("train/loss", "train/lr", "train/throughput", "val/accuracy"):  # what TensorBoard has, MLflow has
            history = [(m.step, m.value) for m in c.get_metric_history(run.info.run_id, tag)]
            assert [s for s, _ in history] == [s for s, _ in tb[tag]] and len(history) >= 2, tag
            assert [v for _, v in history] == pytest.approx([v for _, v in tb[tag]], rel=1e-6), tag
        evals = c.get_metric_history(run.info.run_id, "val/accuracy")
        assert [m.step for m in evals] == [6, 11, 12]  # eval_every, the epoch's end (11 steps), the run's end
        assert evals[-1].value == pytest.approx(record["val_metrics"]["accuracy"])
        assert run.data.metrics["throughput"] == pytest.approx(record["throughput"])
        names = {a.path for a in c.list_artifacts(run.info.run_id)}
        assert {"graph.txt", "metrics.json", "loss.png", ".hydra"} <= names
        assert {a.path for a in c.list_artifacts(run.info.run_id, ".hydra")} >= {".hydra/config.yaml"}
    assert {a.path for a in c.list_artifacts(parent.info.run_id)} >= {"report.md", "report.csv", "best.yaml"}


def test_the_winner_is_tagged_and_the_parallel_jobs_overlapped(sweep):
    uri, sweep_dir, _ = sweep
    _, _, runs = runs_of(uri, "sweeps")
    winners = [r for r in runs if r.data.tags.get("fastpipe.winner") == "true"]
    best = (sweep_dir / "best.yaml").read_text()
    assert len(winners) == 1 and f"job {winners[0].data.tags['fastpipe.job']} of" in best
    assert "# code: project " in best and "- code: project " in (sweep_dir / "report.md").read_text()
    parent = next(r for r in runs if r.data.tags.get("fastpipe.stage") == "sweep")
    assert parent.data.tags["fastpipe.winner_job"] == winners[0].data.tags["fastpipe.job"]
    spans = [json.loads((sweep_dir / str(n) / "launcher.json").read_text()) for n in (0, 1)]
    assert max(s["started"] for s in spans) < min(s["ended"] for s in spans), "jobs 0 and 1 did not run together"


def test_a_killed_jobs_run_is_not_left_running(sweep):
    uri, sweep_dir, _ = sweep
    _, _, runs = runs_of(uri, "sweeps")
    assert not [r for r in runs if r.info.status == "RUNNING"]
    killed = next(r for r in runs if r.data.tags.get("fastpipe.job") == "2")
    record = json.loads((sweep_dir / "2" / "metrics.json").read_text())
    assert record["status"] == "failed" and "SIGKILL" in record["reason"]
    assert killed.info.status == "FAILED" and "SIGKILL" in killed.data.tags["fastpipe.reason"]


# ------------------------------------------------------------------ in this process: resume, a dead server
def settings_for(run_dir: Path, overrides):
    """Settings as the entry point makes them (params and code included) for an in-process run."""
    from fastpipe.record.hydra_context import run_context

    settings = make_settings(overrides)
    settings.context = run_context(compose(overrides), settings.choices, overrides, {"stage": "run"}, run_dir)
    return settings


def test_a_resumed_run_continues_its_mlflow_run(server, tmp_path):
    from fastpipe.job.training import run_training

    uri, _ = server
    base = [*TINY, "logger=mlflow", f"logger.mlflow.tracking_uri={uri}", "logger.mlflow.experiment=resumes",
            "train.checkpoint_every=3", "dataset.num_images=160"]
    first = run_training(settings_for(tmp_path, [*base, "train.max_steps=6"]), tmp_path)
    kept = json.loads((tmp_path / "trackers.json").read_text())["mlflow"]
    second = run_training(settings_for(tmp_path, [*base, "train.max_steps=12", "train.resume=auto"]), tmp_path)
    assert first["status"] == second["status"] == "ok"
    c, _, runs = runs_of(uri, "resumes")
    assert [r.info.run_id for r in runs] == [kept["run_id"]]  # one run, continued
    run = runs[0]
    assert run.info.status == "FINISHED" and run.data.params["train.max_steps"] == "6"  # params stay as first logged
    steps = [m.step for m in c.get_metric_history(run.info.run_id, "train/loss")]
    assert steps[0] < 6 < steps[-1]  # the window edges of both processes, in one history


def test_a_run_its_trainer_could_not_end_is_ended_by_the_launching_process(server, tmp_path):
    """A trainer killed outright (SIGKILL) leaves its MLflow run RUNNING; launch() ends it with the failed
    record it writes for the dead trainer (trackers_file.settle)."""
    from fastpipe.record.loggers import RunInfo, trackers_file
    from fastpipe.record.loggers.mlflow_run import MlflowLogger

    uri, _ = server
    logger = MlflowLogger(tracking_uri=uri, experiment="settled")
    logger.on_start(RunInfo(dir=tmp_path, run_id="launch-1", name="killed"))  # what the trainer did before it died
    record = {"status": "failed", "run_id": "launch-1",
              "reason": "training process killed by SIGKILL (the out-of-memory killer sends SIGKILL)"}
    trackers_file.settle(tmp_path, record)
    run = client(uri).get_run(logger.run_id)
    assert run.info.status == "FAILED" and run.data.tags["fastpipe.reason"] == record["reason"]
    assert json.loads((tmp_path / "trackers.json").read_text())["mlflow"]["ended"] is True
    trackers_file.settle(tmp_path, record)  # once ended, never again

    # Killed after it wrote ok results, while sending its last records: the launching process sends them.
    done = tmp_path / "done"
    done.mkdir()
    logger = MlflowLogger(tracking_uri=uri, experiment="settled")
    logger.on_start(RunInfo(dir=done, run_id="launch-2", name="killed-late"))
    (done / "graph.txt").write_text("fastpipe training graph\n")
    record = {"status": "ok", "run_id": "launch-2", "steps": 40, "throughput": 812.5, "val_metrics": {"accuracy": 0.94},
              "warnings": ["killed by SIGTERM after it had finished and written these results"]}
    trackers_file.settle(done, record)
    run = client(uri).get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["throughput"] == 812.5
    assert run.data.metrics["val_metrics.accuracy"] == 0.94 and "killed by SIGTERM" in run.data.tags["fastpipe.warnings"]
    assert [a.path for a in client(uri).list_artifacts(logger.run_id)] == ["graph.txt"]

    # Its logger failed mid-run (the server died and came back): the trainer called it no more, and the
    # run stayed RUNNING, half-logged; the launching process back-fills it from the run folder and ends it.
    half = tmp_path / "half"
    half.mkdir()
    logger = MlflowLogger(tracking_uri=uri, experiment="settled")
    logger.on_start(RunInfo(dir=half, run_id="launch-3", name="half-logged"))
    trackers_file.remember(half, "mlflow", failed="ConnectionError: the server went away")
    record = {"status": "ok", "run_id": "launch-3", "steps": 40, "throughput": 700.0,
              "warnings": ["logger.mlflow failed (ConnectionError: the server went away) and was called no more"]}
    trackers_file.settle(half, record)
    run = client(uri).get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.data.metrics["throughput"] == 700.0


def test_a_hard_killed_runs_mlflow_run_ends_with_the_next_run_in_its_folder(server, tmp_path):
    """A single run trains in the process the user started, so nothing outlives a SIGKILL to it: its record
    stays ``running`` and its MLflow run RUNNING. The next run in that folder (not a resume, which continues
    the same MLflow run) first ends it, FAILED, with the reason its record reads as."""
    from fastpipe.record import results
    from fastpipe.record.loggers import RunInfo
    from fastpipe.record.loggers.mlflow_run import MlflowLogger
    from fastpipe.record.run_record import failed

    uri, _ = server
    dead = MlflowLogger(tracking_uri=uri, experiment="hard-killed")
    dead.on_start(RunInfo(dir=tmp_path, run_id="killed-1", name="killed"))  # what the killed run did before it died
    results.write(tmp_path, failed("the run did not finish", {}, [], run_id="killed-1", status="running"))
    proc = in_process([*TINY, "train.max_steps=2", "logger=mlflow", f"logger.mlflow.tracking_uri={uri}",
                       "logger.mlflow.experiment=hard-killed", f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = client(uri).get_run(dead.run_id)
    assert run.info.status == "FAILED" and run.data.tags["fastpipe.reason"].startswith("its process died")
    again = json.loads((tmp_path / "trackers.json").read_text())["mlflow"]
    assert again["run_id"] != dead.run_id and again["ended"]  # the new run's own, ended as it finished


def test_a_server_killed_mid_run_costs_seconds_and_the_run_ends_ok(server, tmp_path):
    from fastpipe.job.training import run_training

    uri, proc = server
    overrides = [*TINY, "logger=mlflow", f"logger.mlflow.tracking_uri={uri}", "logger.mlflow.experiment=killed",
                 "model._target_=fault_models.Slow", "+model.sleep_s=0.1", "train.max_steps=40", "measure.window=2"]
    settings = settings_for(tmp_path, overrides)
    killed = {}

    def kill_once_logging():  # the server dies once the run has logged to it
        c = client(uri)
        while proc.poll() is None:
            entry = json.loads((tmp_path / "trackers.json").read_text()).get("mlflow", {}) \
                if (tmp_path / "trackers.json").is_file() else {}
            if entry.get("run_id") and c.get_metric_history(entry["run_id"], "train/loss"):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                killed["at"] = time.monotonic()
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=kill_once_logging, daemon=True)
    watcher.start()
    record = run_training(settings, tmp_path)
    ended = time.monotonic()
    assert "at" in killed, "the run ended before the server was killed"
    assert record["status"] == "ok"
    assert any("logger.mlflow failed" in w for w in record["warnings"]), record["warnings"]
    # After the kill the run had at most its 40 steps of 0.1 s left to train, and its end; MLflow's own
    # client would retry the dead server for minutes (7 retries, backoff factor 2, 120 s per request).
    left = ended - killed["at"]
    assert left < 0.1 * 40 + 15, f"{left:.1f} s from the kill to the run's end"
    assert json.loads((tmp_path / "trackers.json").read_text())["mlflow"]["failed"]
