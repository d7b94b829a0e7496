"""launcher=ddp (issue 5): CPU, gloo, 2 processes started by torch's elastic launcher.

The slow tests run fastpipe as a user does (`python -m fastpipe ...`, torchrun, the benchmark
script) in subprocesses with tiny settings (conftest's OMP_NUM_THREADS=1 keeps a 2-core machine responsive).
The fast tests pin the pieces: config checks, rank metrics, failure reasons, the Slurm launcher config.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import HERE_TESTS, REPO


SMALL = ["dataset.image_size=16", "measure.warmup_steps=2", "measure.window=3", "runtime.progress=false",
         "data.num_workers=0"]


def _run(args, cwd=REPO, timeout=400) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _jobs(sweep_dir: Path) -> dict:
    """{job number: metrics} of a sweep folder, asserting one metrics.json per job folder."""
    files = sorted(sweep_dir.rglob("metrics.json"))
    jobs = {int(f.parent.name): json.loads(f.read_text()) for f in files}
    assert len(jobs) == len(files), files  # exactly one metrics.json per job, none from other ranks
    return jobs


# ---------------------------------------------------------------- end to end (slow)
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
def test_a_model_with_an_unused_head_trains_with_find_unused_parameters_and_says_so_without(tmp_path):
    proc = _run([sys.executable, "-m", "fastpipe", "-m", "launcher=ddp", "model._target_=fault_models.UnusedHead",
                 "launcher.find_unused_parameters=false,true", "dataset.num_images=200", "train.batch_size=16",
                 "train.max_steps=4", f"hydra.sweep.dir={tmp_path}", *SMALL])
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _jobs(tmp_path)
    assert jobs[0]["status"] == "failed" and "set launcher.find_unused_parameters=true" in jobs[0]["reason"], jobs[0]
    assert jobs[1]["status"] == "ok" and jobs[1]["steps"] == 4


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


STREAM = [f"hydra.searchpath=[file://{HERE_TESTS / 'conf'}]", "dataset=stream", "model._target_=fault_models.TabularNet",
          "train.batch_size=8", "data.num_workers=0", "measure.warmup_steps=2", "measure.window=3",
          "runtime.progress=false"]


def test_a_stream_trains_under_ddp(tmp_path):
    proc = _run([sys.executable, "-m", "fastpipe", *STREAM, "launcher=ddp", "launcher.nproc_per_node=2",
                 "train.epochs=2", f"hydra.run.dir={tmp_path}"], timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["status"] == "ok" and m["steps"] == 2 * (96 // 2 // 8) and m["env"]["world_size"] == 2
