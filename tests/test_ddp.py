"""launcher=ddp (issue 5): CPU, gloo, 2 processes started by torch's elastic launcher.

The slow tests run fastpipe as a user does (`python -m fastpipe ...`, torchrun, the benchmark
script) in subprocesses with tiny settings; OMP_NUM_THREADS=1 keeps a 2-core machine responsive.
The fast tests pin the pieces: config checks, rank metrics, failure reasons, the Slurm launcher config.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import REPO, make_settings

from fastpipe.errors import ConfigError
from fastpipe.launch.elastic import elastic_config, failure_reason
from fastpipe.launch.launcher import launch
from fastpipe.measure.steps import combine_ranks

TESTS = Path(__file__).resolve().parent
SMALL = ["dataset.image_size=16", "measure.warmup_steps=2", "measure.window=3", "runtime.progress=false",
         "data.num_workers=0"]


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # tests/ on the path: model._target_=ddp_helpers.CrashOnRank imports in every worker.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), str(REPO), env.get("PYTHONPATH")]))
    return env


def _run(args, cwd=REPO, timeout=400) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def _jobs(sweep_dir: Path) -> dict:
    """{job number: metrics} of a sweep folder, asserting one metrics.json per job folder."""
    files = sorted(sweep_dir.rglob("metrics.json"))
    jobs = {int(f.parent.name): json.loads(f.read_text()) for f in files}
    assert len(jobs) == len(files), files  # exactly one metrics.json per job, none from other ranks
    return jobs


# ---------------------------------------------------------------- end to end (slow)
@pytest.mark.slow
def test_sweep_single_and_ddp_rows_train_to_the_same_accuracy(tmp_path):
    proc = _run([sys.executable, "-m", "fastpipe", "-m", "launcher=single,ddp", "dataset.num_images=800",
                 "train.batch_size=32", "train.epochs=6", f"hydra.sweep.dir={tmp_path}", *SMALL])
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _jobs(tmp_path)
    single, ddp = jobs[0], jobs[1]
    assert single["status"] == ddp["status"] == "ok", (single["reason"], ddp["reason"])
    assert (single["choices"]["launcher"], ddp["choices"]["launcher"]) == ("single", "ddp")
    assert single["env"]["world_size"] == 1 and ddp["env"]["world_size"] == 2
    # Held-out accuracy is over the whole split (all-reduced), in the same band as one process.
    assert single["accuracy"] >= 0.6 and ddp["accuracy"] >= 0.6, (single["accuracy"], ddp["accuracy"])
    assert abs(single["accuracy"] - ddp["accuracy"]) <= 0.15
    # DistributedSampler shards the data: each rank runs about half the steps of one process.
    assert ddp["steps"] <= 0.6 * single["steps"]
    # Job throughput is the sum of the ranks' own rates; data-wait and memory the worst rank's.
    per_rank = ddp["per_rank"]
    assert len(per_rank["throughput"]) == 2 and min(per_rank["throughput"]) > 0
    assert ddp["throughput"] == pytest.approx(sum(per_rank["throughput"]))
    assert ddp["data_wait_frac"] == max(per_rank["data_wait_frac"])
    assert ddp["peak_mem_gb"] == max(per_rank["peak_mem_gb"])
    # Only rank 0 wrote the run folder: one TensorBoard event file, the graph names DDP.
    assert len(list((tmp_path / "1" / "tb").glob("events.out.tfevents.*"))) == 1
    assert "DistributedDataParallel" in (tmp_path / "1" / "graph.txt").read_text()


@pytest.mark.slow
def test_a_crashing_rank_fails_its_job_quickly_and_the_sweep_goes_on(tmp_path):
    start = time.monotonic()
    # Job 0: ddp, rank 1 raises at its 3rd forward while rank 0 waits in the gradient all-reduce.
    # Job 1: single (rank 0 only: CrashOnRank trains like TinyCNN), to show the sweep carried on.
    proc = _run([sys.executable, "-m", "fastpipe", "-m", "launcher=ddp,single", "model._target_=ddp_helpers.CrashOnRank",
                 "dataset.num_images=240", "train.batch_size=16", "train.max_steps=10", f"hydra.sweep.dir={tmp_path}",
                 *SMALL])
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-3000:]  # in a sweep a failed job is a row
    jobs = _jobs(tmp_path)
    failed, ok = jobs[0], jobs[1]
    assert failed["status"] == "failed" and ok["status"] == "ok"
    assert failed["reason"].startswith("rank 1 of 2 failed: RuntimeError: injected failure on rank 1"), failed["reason"]
    assert "ddp_helpers.py" in failed["traceback"]  # the failing rank's own traceback
    assert failed["choices"]["launcher"] == "ddp"
    assert "rank 1 of 2 failed" in proc.stderr
    # launcher.timeout_s is 600: the job ended on the crash, not by waiting out a collective.
    assert elapsed < 300, elapsed


@pytest.mark.slow
def test_a_stop_signal_reaches_every_rank_and_the_job_checkpoints(tmp_path):
    # SIGTERM to the Hydra process (what Slurm sends): the elastic agent passes it to the ranks,
    # which checkpoint at the next window edge; the job is "preempted" with exit code 75.
    args = [sys.executable, "-m", "fastpipe", "launcher=ddp", "dataset.num_images=2400", "train.batch_size=8",
            "train.epochs=3", f"hydra.run.dir={tmp_path}", *SMALL]
    proc = subprocess.Popen(args, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (tmp_path / "graph.txt").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)  # rank 0 writes graph.txt just before training starts
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 75, stderr[-3000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == "preempted" and "stopped by SIGTERM" in metrics["reason"]
    assert Path(metrics["checkpoint"]).is_file()


@pytest.mark.slow
def test_under_torchrun_fastpipe_joins_the_group_and_writes_one_run_folder(tmp_path):
    # No fixed hydra.run.dir: every rank's Hydra picks a folder; all record in rank 0's.
    proc = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                 "-m", "fastpipe", "launcher=ddp", "dataset.num_images=200", "train.batch_size=16",
                 "train.max_steps=8", *SMALL], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = list((tmp_path / "outputs").rglob("metrics.json"))
    assert len(files) == 1, files
    metrics = json.loads(files[0].read_text())
    assert metrics["status"] == "ok" and metrics["env"]["world_size"] == 2 and metrics["throughput"] > 0
    assert len(metrics["per_rank"]["throughput"]) == 2
    assert proc.stdout.count("fastpipe run summary") == 1  # rank 0 prints; the others stay quiet


@pytest.mark.slow
def test_benchmark_script_smoke_mode(tmp_path):
    proc = _run([sys.executable, str(REPO / "benchmarks" / "ddp.py"), "--smoke", "--out", str(tmp_path),
                 "--variant", "bf16:launcher.comm_hook=bf16 launcher.bucket_cap_mb=1", "--profile"])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    table = (tmp_path / "ddp.md").read_text()
    assert "| launcher=single | 1 |" in table and "| launcher=ddp nproc_per_node=2 | 2 |" in table
    assert "| ddp bf16 | 2 |" in table and "| profile=on ddp | 2 |" in table
    assert table.count("| ok |") == 4 and "launcher=ddp nproc_per_node=2 / single: " in table and "single: n/a" not in table
    assert "profile=on ddp / single: " in table and "(profiled: timing distorted)" in table
    log = (tmp_path / "ddp.log").read_text()
    assert "launcher=ddp" in log and "fastpipe run summary" in log and "launcher.comm_hook=bf16" in log
    ddp = json.loads((tmp_path / "runs" / "ddp" / "metrics.json").read_text())
    assert ddp["env"]["world_size"] == 2 and ddp["throughput"] > 0
    graph = (tmp_path / "runs" / "bf16" / "graph.txt").read_text()
    assert "bucket_cap_mb=1  comm_hook=bf16" in graph
    traces = list((tmp_path / "runs" / "profile" / "profile").glob("*.pt.trace.json*"))
    assert len(traces) == 1  # rank 0 only
    summary = _run([sys.executable, str(REPO / "benchmarks" / "trace_summary.py"), str(traces[0])])
    assert summary.returncode == 0 and "5 profiled steps" in summary.stdout, summary.stdout + summary.stderr


# ---------------------------------------------------------------- pieces (fast)
def test_ddp_settings_are_checked():
    assert make_settings(["launcher=ddp"]).launcher.nproc_per_node == "auto"
    with pytest.raises(ConfigError, match="launcher.backend"):
        make_settings(["launcher=ddp", "launcher.backend=mpi"])
    with pytest.raises(ConfigError, match="rdzv_endpoint"):
        make_settings(["launcher=ddp", "launcher.nnodes=2"])
    with pytest.raises(ConfigError, match="nproc_per_node"):
        make_settings(["launcher=ddp", "launcher.nproc_per_node=0"])


def test_ddp_settings_are_checked_for_buckets_and_hooks():
    cfg = make_settings(["launcher=ddp"]).launcher
    assert (cfg.bucket_cap_mb, cfg.comm_hook, cfg.broadcast_buffers) == (None, "none", True)  # DDP's defaults
    with pytest.raises(ConfigError, match="launcher.comm_hook='int8'"):
        make_settings(["launcher=ddp", "launcher.comm_hook=int8"])
    with pytest.raises(ConfigError, match="bucket_cap_mb=0"):
        make_settings(["launcher=ddp", "launcher.bucket_cap_mb=0"])


@pytest.mark.slow
def test_ddp_wrap_sets_bucket_size_compression_and_buffer_broadcast(tmp_path):
    """Two real gloo ranks: the gradient is the ranks' mean, rounded to 16 bits only with comm_hook=bf16/fp16;
    BatchNorm statistics are rank 0's on every rank only with broadcast_buffers=true."""
    from ddp_helpers import gradients_after_ddp

    out = torch.multiprocessing.get_context("spawn").Manager().dict()
    torch.multiprocessing.start_processes(gradients_after_ddp, args=(str(tmp_path / "store"), 1.5, out),
                                          nprocs=2, start_method="spawn")
    for hook in ("none", "bf16", "fp16"):
        (grad0, cap0), (grad1, _) = out[0][hook], out[1][hook]
        assert cap0 == int(1.5 * 1024 * 1024)
        assert torch.equal(grad0, grad1)  # both ranks hold the same synchronised gradient
        # fp32 gradients are not generally 16-bit values; compressed ones are values of their format
        as_bf16, as_fp16 = torch.equal(grad0, grad0.bfloat16().float()), torch.equal(grad0, grad0.half().float())
        assert {"none": not as_bf16 and not as_fp16, "bf16": as_bf16, "fp16": as_fp16 and not as_bf16}[hook], hook
    assert not torch.equal(out[0]["none"][0], out[0]["bf16"][0])
    assert out[0]["default"] == (25 * 1024 * 1024, True)  # null: DDP's own default (and its 1 MB first bucket)
    assert torch.equal(out[0]["broadcast_buffers=True"], out[1]["broadcast_buffers=True"])  # rank 0's, everywhere
    assert not torch.equal(out[0]["broadcast_buffers=False"], out[1]["broadcast_buffers=False"])


def test_fresh_process_false_is_refused_outside_torchrun(tmp_path, monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(ConfigError, match="fresh_process"):
        launch(make_settings(["launcher=ddp", "launcher.fresh_process=false"]), tmp_path)


def test_single_launcher_under_torchrun_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "localhost")
    monkeypatch.setenv("MASTER_PORT", "1")
    with pytest.raises(ConfigError, match="use launcher=ddp"):
        launch(make_settings(["launcher=single"]), tmp_path)


def test_process_counts_and_backend_resolve_per_device():
    cfg = make_settings(["launcher=ddp", "device=cpu"]).launcher
    assert cfg.processes(gpus=0, cores=16) == 2  # auto on a CPU
    assert cfg.processes(gpus=4, cores=16) == 4  # auto: one per visible GPU
    assert cfg.processes(gpus=0, cores=1) == 1
    cfg.nproc_per_node = 3
    assert cfg.processes(gpus=0, cores=16) == 3
    with pytest.raises(ConfigError, match="2 GPU"):
        cfg.processes(gpus=2, cores=16)
    cfg.nproc_per_node = 64
    with pytest.raises(ConfigError, match="launcher.nproc_per_node=64 but this machine has 2 CPU core"):
        cfg.processes(gpus=0, cores=2)
    assert cfg.backend_for("cpu") == "gloo" and cfg.backend_for("cuda") == "nccl"
    cfg.backend = "nccl"
    with pytest.raises(ConfigError, match="nccl needs CUDA"):
        cfg.backend_for("cpu")


def test_elastic_config_one_node_is_private_and_several_nodes_share_the_endpoint():
    one = elastic_config(make_settings(["launcher=ddp"]).launcher, 2)
    other = elastic_config(make_settings(["launcher=ddp"]).launcher, 2)
    assert (one.rdzv_backend, one.rdzv_endpoint, one.nproc_per_node) == ("c10d", "localhost:0", 2)
    assert one.run_id != other.run_id and one.max_restarts == 0 and one.rdzv_configs["timeout"] == 600
    many = elastic_config(make_settings(["launcher=ddp", "launcher.nnodes=2", "launcher.rdzv_endpoint=node0:29500",
                                         "launcher.rdzv_backend=static", "launcher.node_rank=1"]).launcher, 8)
    assert (many.min_nodes, many.max_nodes, many.rdzv_endpoint, many.run_id) == (2, 2, "node0:29500", "fastpipe")
    assert many.rdzv_configs["rank"] == 1


def test_combine_ranks_sums_throughput_and_reports_the_worst_rank():
    def summary(rate, wait, mem, median):
        return {"throughput": rate, "data_wait_frac": wait, "peak_mem_gb": mem, "gpu_util": None, "warmup_s": 1.0,
                "step_time_ms": {"median": median}, "measured_steps": 20, "peak_mem_kind": "cpu_max_rss_process"}

    job = combine_ranks([summary(100.0, 0.1, 2.0, 10.0), summary(90.0, 0.3, 1.5, 11.0)])
    assert job["throughput"] == pytest.approx(190.0)
    assert job["data_wait_frac"] == 0.3 and job["peak_mem_gb"] == 2.0
    assert job["step_time_ms"]["median"] == 11.0 and job["measured_steps"] == 20 and job["gpu_util"] is None
    assert job["per_rank"]["throughput"] == [100.0, 90.0] and job["per_rank"]["peak_mem_gb"] == [2.0, 1.5]
    assert combine_ranks([summary(None, None, 1.0, None), summary(5.0, 0.1, 1.0, 1.0)])["throughput"] is None


def _failure(tmp_path, rank, exitcode, message=None, timestamp=1000):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    path = tmp_path / f"error-{rank}.json"
    if message is not None:  # the format torch's @record writes for an exception
        path.write_text(json.dumps({"message": {"message": message, "extraInfo": {
            "py_callstack": f"Traceback ...\n{message}\n", "timestamp": str(timestamp)}}}))
    return ProcessFailure(local_rank=rank, pid=100 + rank, exitcode=exitcode, error_file=str(path))


def test_failure_reason_names_the_root_cause_rank(tmp_path):
    # Same second: rank 0's lost-peer error is a symptom; rank 1's exception is the cause.
    failures = {0: _failure(tmp_path, 0, 1, "DistBackendError: Connection closed by peer [127.0.0.1]:123"),
                1: _failure(tmp_path, 1, 1, "ValueError: bad batch\nmore lines")}
    reason, trace = failure_reason(failures, 2)
    assert reason == "rank 1 of 2 failed: ValueError: bad batch (also failed: rank 0)"
    assert "ValueError: bad batch" in trace


def test_failure_reason_when_a_peer_hung(tmp_path):
    # A hung rank fails nothing itself: its peers time out in a collective. Say so.
    timeout = "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 15000ms for recv"
    reason, _ = failure_reason({0: _failure(tmp_path, 0, 1, timeout)}, 2, timeout_s=15)
    assert reason.startswith("rank 0 of 2 failed: RuntimeError: [gloo")
    assert reason.endswith("[a peer rank stopped answering: hung or dead; launcher.timeout_s=15]")


def test_failure_reason_for_a_killed_rank(tmp_path):
    reason, trace = failure_reason({3: _failure(tmp_path, 3, -9)}, 4)
    assert reason.startswith("rank 3 of 4 failed: training process killed by SIGKILL") and trace is None
    reason, _ = failure_reason({1: _failure(tmp_path, 1, 3)}, 2)
    assert reason == "rank 1 of 2 failed: training process exited with code 3"


# ---------------------------------------------------------------- Slurm (hydra-submitit-launcher)
def test_slurm_launcher_config_composes():
    from hydra import compose as hydra_compose, initialize_config_dir

    from fastpipe.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = hydra_compose("config", overrides=["hydra/launcher=fastpipe_slurm", "launcher=ddp",
                                                 "hydra.launcher.gpus_per_node=8"], return_hydra_config=True)
        plain = hydra_compose("config", overrides=["hydra/launcher=submitit_slurm"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert (launcher.nodes, launcher.tasks_per_node, launcher.gpus_per_node) == (1, 1, 8)
    assert launcher.timeout_min == 60 and launcher.signal_delay_s == 120 and launcher.max_num_timeout == 0
    assert cfg.launcher.name == "ddp"
    assert plain.hydra.launcher._target_ == launcher._target_


@pytest.mark.slow
def test_slurm_launcher_config_prints_from_the_command_line():
    proc = _run([sys.executable, "-m", "fastpipe", "hydra/launcher=fastpipe_slurm", "--cfg", "hydra",
                 "--package", "hydra.launcher"], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "SlurmLauncher" in proc.stdout and "tasks_per_node: 1" in proc.stdout
