"""Loggers and callbacks: events in order off the training thread, a failing or hung one never stops the run,
TensorBoard and CSV hold the same scalars, the logger choice as metrics.json and best.yaml record it."""
from __future__ import annotations

import csv
import threading
import time
from pathlib import Path

import pytest

from conftest import TINY, compose, make_settings, run_in_process
from fastpipe.config import Hook, job_choices
from fastpipe.config.logger import logger_choice
from fastpipe.errors import EnvironmentProblem
from fastpipe.record.loggers import RunInfo, preflight
from fastpipe.record.loggers.dispatch import RunHooks

EVENTS = {}  # Collect's events, by its name


class Collect:
    """A project's callback: every hook, with the step and the thread it ran on."""

    def __init__(self, store: str = "seen") -> None:
        self.events = EVENTS.setdefault(store, [])

    def _keep(self, method, run, payload=None):
        self.events.append((method, run.step, payload, threading.current_thread().name))

    def on_start(self, run):
        self._keep("on_start", run)

    def on_window(self, run, scalars):
        self._keep("on_window", run, scalars)

    def on_eval(self, run, metrics):
        self._keep("on_eval", run, metrics)

    def on_checkpoint(self, run, path):
        self._keep("on_checkpoint", run, Path(path).name)

    def on_end(self, run, record):
        self._keep("on_end", run, record.get("status"))


class Broken:
    calls = 0

    def on_window(self, run, scalars):
        Broken.calls += 1
        raise ConnectionError("tracker down")


class Hung:
    timeout_s = 0.5

    def on_end(self, run, record):
        time.sleep(30)


class NeedsAPackage:
    requires = ("no_such_tracker_package", "fastpipe[nosuch]")


def hook(key, cls, **params):
    return Hook("callbacks", key, f"{__name__}.{cls.__name__}", params)


def info(tmp_path):
    return RunInfo(dir=tmp_path, run_id="r1", name="unit")


def test_hooks_see_the_run_in_order_off_the_training_thread(tmp_path):
    EVENTS.pop("order", None)
    hooks = RunHooks([hook("order", Collect, store="order")], info(tmp_path))
    hooks.window(2, {"train/loss": 1.0})
    hooks.evaluation(2, {"val/accuracy": 0.5})
    hooks.checkpoint(3, tmp_path / "step-00000003.pt")
    assert hooks.end(3, {"status": "ok"}) == []
    events = EVENTS["order"]
    assert [(m, s) for m, s, _, _ in events] == [("on_start", 0), ("on_window", 2), ("on_eval", 2),
                                                  ("on_checkpoint", 3), ("on_end", 3)]
    assert events[1][2] == {"train/loss": 1.0} and events[-1][2] == "ok"
    assert {t for *_, t in events} == {"fastpipe-callbacks.order"}  # never the training thread


def test_a_failing_logger_warns_once_and_the_others_go_on(tmp_path, capsys):
    EVENTS.pop("beside", None)
    Broken.calls = 0
    hooks = RunHooks([hook("broken", Broken), hook("beside", Collect, store="beside")], info(tmp_path))
    for step in (1, 2, 3):
        hooks.window(step, {"train/loss": 1.0})
    notes = hooks.end(3, {"status": "ok"})
    assert Broken.calls == 1  # not called again after it failed
    assert notes == ["callbacks.broken failed (on_window at step 1: ConnectionError: tracker down); the run goes on "
                     "without it"]
    assert [s for m, s, _, _ in EVENTS["beside"] if m == "on_window"] == [1, 2, 3]
    assert capsys.readouterr().err.count("fastpipe: warning: callbacks.broken failed") == 1


def test_a_hung_logger_costs_the_runs_end_its_timeout_at_most(tmp_path):
    hooks = RunHooks([hook("hung", Hung)], info(tmp_path))
    start = time.monotonic()
    notes = hooks.end(0, {"status": "ok"})
    assert time.monotonic() - start < 5
    assert notes == ["callbacks.hung made no progress for 1 s at the run's end; the run ends without its last records"]


def tensorboard_scalars(folder: Path) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_a_run_gives_csv_the_scalars_tensorboard_gets_and_callbacks_every_event(tmp_path, one_torch_thread):
    EVENTS.pop("seen", None)
    record = run_in_process(tmp_path, [*TINY, "logger=[tensorboard,csv]", f"+callbacks.seen._target_={__name__}.Collect",
                                       "train.checkpoint_every=6", "train.eval_every=6", "train.clip_grad_norm=1.0"])
    assert record["status"] == "ok" and record["choices"]["logger"] == "[tensorboard,csv]" and not record["warnings"]
    tb = tensorboard_scalars(tmp_path / "tb")
    with open(tmp_path / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    from_csv = {tag: [(int(r["step"]), float(r[tag])) for r in rows if r[tag]] for tag in rows[0] if tag != "step"}
    assert set(from_csv) == set(tb) >= {"train/loss", "train/lr", "train/grad_norm", "train/throughput",
                                        "train/data_wait_frac", "train/step_time_ms", "val/accuracy", "val/loss"}
    for tag, points in tb.items():
        assert [s for s, _ in from_csv[tag]] == [s for s, _ in points], tag
        assert [v for _, v in from_csv[tag]] == pytest.approx([v for _, v in points], rel=1e-6), tag
    assert len({int(r["step"]) for r in rows}) == len(rows)  # one row per logged step
    events = EVENTS["seen"]
    assert events[0][0] == "on_start" and events[-1][:3] == ("on_end", 12, "ok")
    assert [(s, p) for m, s, p, _ in events if m == "on_checkpoint"] == [(6, "step-00000006.pt"), (12, "step-00000012.pt")]
    windows = [p for m, _, p, _ in events if m == "on_window" and "train/loss" in p]
    assert windows and all(0 < w["train/lr"] <= 0.003 for w in windows)


def test_the_logger_choice_is_recorded_as_hydra_spells_it():
    assert logger_choice("mlflow", {"mlflow": {}}) == "mlflow"
    assert logger_choice(None, {"tensorboard": {}, "mlflow": {}}) == "[tensorboard,mlflow]"
    assert logger_choice(None, {}) == "none" and logger_choice("none", {}) == "none"
    cfg = compose(["logger=[tensorboard,mlflow]"])
    assert job_choices({"precision": "fp32"}, cfg) == {"precision": "fp32", "logger": "[tensorboard,mlflow]"}
    settings = make_settings(["logger=[tensorboard,mlflow]", "logger.mlflow.experiment=x"])
    assert list(settings.logger) == ["tensorboard", "mlflow"] and settings.logger["mlflow"].params["experiment"] == "x"
    assert not make_settings(["logger=none"]).logger


def test_best_yaml_pins_several_loggers_as_a_list():
    import yaml

    from fastpipe.report.winner import command_line, winner_yaml

    choices = {"precision": "amp", "logger": "[tensorboard,mlflow]"}
    defaults = yaml.safe_load(winner_yaml(["precision=amp"], choices, []))["defaults"]
    assert {"override /logger": ["tensorboard", "mlflow"]} in defaults and {"override /precision": "amp"} in defaults
    assert "'logger=[tensorboard,mlflow]'" in command_line([], choices)


def test_a_missing_package_or_a_dead_server_is_one_line_before_training(tmp_path):
    with pytest.raises(EnvironmentProblem, match=r"callbacks.needs needs the no_such_tracker_package package, which is "
                                                 r"not installed here; install it: pip install \"fastpipe\[nosuch\]\""):
        hook("needs", NeedsAPackage).check()
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there once closed
    mlflow = Hook("logger", "mlflow", "fastpipe.record.loggers.mlflow_run.MlflowLogger",
                  {"tracking_uri": f"http://127.0.0.1:{port}", "timeout_s": 2.0})
    with pytest.raises(EnvironmentProblem, match=rf"the MLflow tracking server at http://127.0.0.1:{port} cannot be "
                                                 r"reached \(ConnectionRefusedError.*\); start it"):
        preflight([mlflow])
    mlflow.params["tracking_uri"] = str(tmp_path / "mlruns")
    with pytest.raises(EnvironmentProblem, match=r"is MLflow's file store, which MLflow 3 refuses; use sqlite:///mlflow.db"):
        preflight([mlflow])


def test_an_http_server_that_is_not_mlflow_is_one_line_before_training():
    """Any HTTP answer passed the check: a web page or another service at the tracking URI trained the whole
    run, then failed every MLflow call. Only MLflow's JSON answer to an MLflow REST call passes."""
    import http.server
    import threading

    answers = {"page": (404, "text/html", b"<html>not found</html>"), "health": (200, "text/plain", b"OK"),
               "mlflow": (404, "application/json", b'{"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no"}')}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            status, kind, body = answers[self.server.kind]
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    mlflow = Hook("logger", "mlflow", "fastpipe.record.loggers.mlflow_run.MlflowLogger",
                  {"tracking_uri": uri, "timeout_s": 2.0})
    try:
        for kind, said in (("page", "HTTP 404, not JSON"), ("health", "HTTP 200, not JSON")):
            server.kind = kind
            with pytest.raises(EnvironmentProblem, match=rf"^{uri} answers, but not as an MLflow tracking server \(GET "
                                                         rf"/api/2.0/mlflow/experiments/get-by-name gave {said}\); fix "
                                                         r"logger.mlflow.tracking_uri \(or MLFLOW_TRACKING_URI\)"):
                preflight([mlflow])
        server.kind = "mlflow"
        preflight([mlflow])
    finally:
        server.shutdown()
        server.server_close()


def test_wandb_names_stay_within_its_limits():
    from fastpipe.record.loggers.wandb_run import job_type, tags_for

    run = RunInfo(dir=Path("."), run_id="r", name="n", tags=("x" * 80, "a", "a"), stage="probe", sweep_dir=Path("."))
    assert tags_for(run) == ["x" * 64, "a", "probe"]
    assert job_type({"precision": "amp", "compile": "off", "logger": "wandb"}) == "precision=amp"
    assert job_type({"precision": "fp32"}) == "defaults"
    assert len(job_type({f"g{i}": "value" * 5 for i in range(9)})) == 64



def test_only_rank_0_logs_and_a_sweeps_jobs_are_named_by_their_place(tmp_path):
    import dataclasses

    from fastpipe.record.recorder import RunRecorder
    from fastpipe.runtime import Dist

    settings = make_settings([*TINY, "logger=[tensorboard,csv]", "name=ladder"])
    assert RunRecorder.for_run(settings, tmp_path / "rank1", Dist(rank=1, world_size=2)).hooks is None
    assert not (tmp_path / "rank1").exists()  # nothing written by another rank
    settings.context = dataclasses.replace(settings.context, sweep_dir=str(tmp_path), job=3, stage="probe", round=2,
                                           repeat=1)
    run = RunInfo.of(settings, tmp_path / "probe-2" / "3")
    assert run.name == "ladder #3 probe 2 repeat 1" and run.sweep_name == "ladder" and run.stage == "probe"


def test_a_sweep_without_a_tracker_makes_no_sweep_runs(tmp_path):
    from omegaconf import OmegaConf

    from fastpipe.record.loggers.sweep import start_sweep

    for logger in ({}, {"tensorboard": {"_target_": "fastpipe.record.loggers.tensorboard.TensorBoardLogger"}}):
        config = OmegaConf.create({"logger": logger, "hydra": {"sweep": {"dir": str(tmp_path)}, "overrides": {"task": []}}})
        assert start_sweep(config) is None
    assert not (tmp_path / "trackers.json").exists()


def test_a_callback_hydra_refuses_to_build_is_a_warning_with_its_whole_reason(tmp_path, capsys):
    """Hydra blocks os.system as a _target_; its reason runs over several lines, all of them said on one."""
    hooks = RunHooks([Hook("callbacks", "shell", "os.system", {"command": "true"})], info(tmp_path))
    notes = hooks.end(0, {"status": "ok"})
    assert len(notes) == 1 and notes[0].startswith("callbacks.shell could not be built (ConfigError: callbacks.shell.")
    assert "is blocklisted because it allows" in notes[0] and "\n" not in notes[0]
    reason = notes[0].split("blocklisted because it allows", 1)[1]
    assert len(reason.split()) > 3 and notes[0].endswith("); the run goes on without it")
