"""Trackers with no server: MLflow's default sqlite store in the working folder, W&B offline (its run folder
listed by ``wandb sync --dry-run``, its history read back from the ``.wandb`` file), one run feeding both
beside TensorBoard and CSV; and ``+debug=fast``'s whole pipeline within its bound."""
from __future__ import annotations

import importlib.util
import json
import os
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, TINY, compose, make_settings

# Found, not imported, here: collecting this module (the fast tier collects it too) must not import them.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    importlib.util.find_spec("mlflow") is None or importlib.util.find_spec("wandb") is None,
    reason='MLflow and W&B are not installed: pip install "fastpipe[mlflow,wandb]"')]


def same_points(got, want) -> bool:
    """Two (step, value) series alike: the same steps, values equal to float32 (TensorBoard stores float32)."""
    return [s for s, _ in got] == [s for s, _ in want] and [v for _, v in got] == pytest.approx([v for _, v in want],
                                                                                                  rel=1e-6)


def tensorboard_scalars(folder: Path) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """One run with every logger, in a working folder of its own, with no tracking server and no W&B key."""
    from fastpipe.record.hydra_context import run_context
    from fastpipe.job.training import run_training

    folder = tmp_path_factory.mktemp("project")
    run_dir = folder / "outputs" / "run"
    overrides = [*TINY, "logger=[tensorboard,csv,mlflow,wandb]", "name=nightly", "tags=[cpu,smoke]"]
    before, env = os.getcwd(), {k: os.environ.pop(k, None) for k in ("MLFLOW_TRACKING_URI", "WANDB_MODE", "WANDB_API_KEY")}
    os.environ["NETRC"] = str(folder / "no-netrc")  # no `wandb login` either: W&B runs offline
    os.chdir(folder)
    try:
        settings = make_settings(overrides)
        settings.context = run_context(compose(overrides), settings.choices, overrides, {"stage": "run"}, run_dir)
        record = run_training(settings, run_dir)
        yield folder, run_dir, record
    finally:
        os.chdir(before)
        os.environ.pop("NETRC")
        os.environ.update({k: v for k, v in env.items() if v is not None})
        import wandb

        wandb.teardown()


def test_the_run_records_its_name_tags_and_loggers(tracked):
    _, run_dir, record = tracked
    assert record["status"] == "ok" and not record["warnings"], record["warnings"]
    assert record["name"] == "nightly" and record["tags"] == ["cpu", "smoke"]
    assert record["choices"]["logger"] == "[tensorboard,csv,mlflow,wandb]"
    assert record["code"]["project"] is None  # the working folder is no git repository: null, not an error
    assert json.loads((run_dir / "metrics.json").read_text())["code"] == record["code"]


def test_mlflows_default_store_is_sqlite_in_the_working_folder(tracked):
    import mlflow

    folder, run_dir, record = tracked
    client = mlflow.MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(folder.name)  # the working folder's name
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "nightly" and run.data.tags["smoke"] == "true"
    assert run.data.params["choices.logger"] == "[tensorboard,csv,mlflow,wandb]" and run.data.params["name"] == "nightly"
    tb = tensorboard_scalars(run_dir / "tb")
    history = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "train/lr")]
    assert history and same_points(history, tb["train/lr"])
    assert run.data.metrics["val_metrics.accuracy"] == pytest.approx(record["val_metrics"]["accuracy"])


def wandb_records(path: Path):
    """The protobuf Records of a ``.wandb`` file (a LevelDB-style log: 32 KiB blocks of chunks, each a
    7-byte header of CRC-32, length and type, after the file's own 7-byte header)."""
    from wandb.proto import wandb_internal_pb2

    data, block, head = path.read_bytes(), 32768, 7
    assert data[:4] == b":W&B"
    pos, pending = head, b""
    while pos + head <= len(data):
        if block - pos % block < head:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + head])
        chunk, pos = data[pos + head:pos + head + length], pos + head + length
        if kind in (1, 4):  # FULL, LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending + chunk)
            pending = b""
            yield record
        elif kind in (2, 3):  # FIRST, MIDDLE
            pending += chunk


def test_wandb_offline_leaves_a_run_wandb_sync_lists_with_the_runs_history(tracked):
    _, run_dir, record = tracked
    entry = json.loads((run_dir / "trackers.json").read_text())["wandb"]
    assert entry["mode"] == "offline" and entry["ended"] is True
    sync_dir = Path(entry["sync_dir"])
    assert sync_dir.parent == run_dir / "wandb"
    listed = subprocess.run([sys.executable, "-m", "wandb", "sync", "--dry-run", str(sync_dir)], capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0 and f"run-{entry['id']}.wandb" in listed.stdout + listed.stderr, listed.stderr
    (log,) = sync_dir.glob("*.wandb")
    try:
        records = list(wandb_records(log))
    except ImportError:
        pytest.skip("this wandb has no wandb.proto to read its .wandb file with")
    history = [{i.nested_key[0] if i.nested_key else i.key: json.loads(i.value_json) for i in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]
    tb = tensorboard_scalars(run_dir / "tb")
    losses = [(h["trainer/step"], h["train/loss"]) for h in history if "train/loss" in h]
    assert losses and same_points(losses, tb["train/loss"])
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert run.display_name == "nightly" and list(run.tags) == ["cpu", "smoke"]
    assert (sync_dir / "files" / "metrics.json").is_file() and (sync_dir / "files" / "graph.txt").is_file()


def test_a_stopped_run_ends_killed_and_an_abandoned_sweep_leaves_none_running(tracked):
    """In the same sqlite store: a run stopped by a signal ends KILLED with its reason; a sweep whose
    process exits without its end leaves its parent and its jobs KILLED."""
    from fastpipe.record.loggers import mlflow_common as common, mlflow_sweep
    from fastpipe.record.loggers.sweep import SweepInfo

    folder, _, _ = tracked
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    entry = mlflow_sweep.start({"tracking_uri": uri, "experiment": "abandoned"}, SweepInfo(dir=folder, name="s"), None)
    client = common.client(uri, 5.0)

    def job(num):
        return client.create_run(entry["experiment_id"], tags={"mlflow.parentRunId": entry["parent_run_id"],
                                                                "fastpipe.run_dir": str(folder / "sweep" / str(num)),
                                                                "fastpipe.run_id": f"launch-{num}"}).info.run_id

    stopped, orphan = job(0), job(1)
    common.end_run(client, stopped, {"status": "preempted", "reason": "stopped by SIGTERM at step 4"})
    mlflow_sweep.abandoned(entry)  # job 1 never recorded an outcome
    runs = {r.info.run_id: r for r in client.search_runs([entry["experiment_id"]])}
    assert runs[entry["parent_run_id"]].info.status == "KILLED"
    assert runs[stopped].info.status == "KILLED" and runs[stopped].data.tags["fastpipe.reason"].startswith("stopped by")
    assert runs[orphan].info.status == "KILLED" and "ended before it recorded" in runs[orphan].data.tags["fastpipe.reason"]


def test_debug_fast_runs_the_default_jobs_whole_pipeline_within_30_s(tmp_path):
    """``+debug=fast``: build, 10 steps, one evaluation of two batches, a checkpoint at step 5 and the run's
    files. Its bound is 30 s on a 2-core CPU; the machine running the suite is shared, so the test holds
    the CPU time the pipeline costs (all processes), and the wall time with the machine's load allowed for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "fastpipe", "+debug=fast", "runtime.progress=false",
                               f"hydra.run.dir={tmp_path}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"+debug=fast did not finish in 300 s: {(exc.stdout or b'')[-2000:]!r} {(exc.stderr or b'')[-2000:]!r}")
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["status"] == "ok" and record["steps"] == 10 and record["choices"]["compile"] == "off"
    assert (tmp_path / "checkpoints" / "step-00000005.pt").is_file()
    assert "the first 2 batches" in (tmp_path / "graph.txt").read_text()
    assert [e for e in tensorboard_scalars(tmp_path / "tb")["val/accuracy"]][0][0] == 10  # one evaluation
    assert len(tensorboard_scalars(tmp_path / "tb")["val/accuracy"]) == 1
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    assert cpu < 30, f"+debug=fast cost {cpu:.1f} s of CPU ({wall:.1f} s wall)"
    assert wall < 30 * max(1.0, load), f"+debug=fast took {wall:.1f} s at a load of {load:.1f} per core"
