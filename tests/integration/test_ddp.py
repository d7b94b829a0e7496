"""launcher=ddp (issue 5): CPU, gloo, 2 processes started by torch's elastic launcher.

The slow tests run fastpipe's command in the test's process (its ranks are the processes torch's elastic
launcher starts) and under torchrun, with tiny settings (conftest's OMP_NUM_THREADS=1 keeps a 2-core machine responsive).
The fast tests pin the pieces: config checks, rank metrics, failure reasons, the Slurm launcher config.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import HERE_TESTS, REPO, in_process, run_sweep


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
SAME = "dataset:\n  num_images: 800\ntrain:\n  batch_size: 32\n  epochs: 6\n"  # single and ddp: one training
SHORT = "dataset:\n  num_images: 200\ntrain:\n  batch_size: 16\n  max_steps: {}\n"
DDP = "defaults:\n  - override /launcher: ddp\n"
# Each a job of one sweep (+case=...): launcher=single (in the sweep's process: the launcher's process is not
# the subject) and launcher=ddp training the same epochs; then launcher=ddp jobs: a rank that raises, a model
# with an unused head, that model with launcher.find_unused_parameters=true.
DDP_CASES = {
    "single": "defaults:\n  - override /launcher: single\nlauncher:\n  fresh_process: false\n" + SAME,
    "ddp": DDP + SAME,
    "crash": DDP + SHORT.format(10) + "model:\n  _target_: ddp_helpers.CrashOnRank\n",
    "unused": DDP + SHORT.format(4) + "model:\n  _target_: fault_models.UnusedHead\n",
    "unused_found": DDP + SHORT.format(4) + "model:\n  _target_: fault_models.UnusedHead\n"
                    "launcher:\n  find_unused_parameters: true\n",
}


@pytest.fixture(scope="module")
def ddp_sweep(tmp_path_factory):
    """The DDP_CASES sweep, run once: (its folder, the finished process)."""
    root = tmp_path_factory.mktemp("ddp_sweep")
    conf = root / "conf" / "case"
    conf.mkdir(parents=True)
    for name, text in DDP_CASES.items():
        (conf / f"{name}.yaml").write_text("# @package _global_\n" + text)
    proc = run_sweep(root / "sweep", ["--config-dir", str(root / "conf"), f"+case={','.join(DDP_CASES)}", *SMALL])
    return root / "sweep", proc


def test_sweep_single_and_ddp_rows_train_to_the_same_accuracy(ddp_sweep):
    sweep_dir, proc = ddp_sweep
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = _jobs(sweep_dir)
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
    assert len(list((sweep_dir / "1" / "tb").glob("events.out.tfevents.*"))) == 1
    assert "DistributedDataParallel" in (sweep_dir / "1" / "graph.txt").read_text()


def test_failing_ranks_fail_their_job_quickly_with_the_cause_and_the_sweep_goes_on(ddp_sweep):
    """Job 2: rank 1 raises at its 3rd forward while rank 0 waits in the gradient all-reduce: the job fails
    on the crash (not by waiting out the collective), with that rank's own traceback. Job 3: a model with
    an unused head fails, naming the setting; job 4 trains it with that setting. A failed job is a row:
    the sweep goes on."""
    sweep_dir, proc = ddp_sweep
    assert proc.returncode == 0, proc.stderr[-3000:]  # in a sweep a failed job is a row
    crashed, unused, found = (job for n, job in sorted(_jobs(sweep_dir).items()) if n >= 2)
    assert crashed["status"] == "failed" and crashed["choices"]["launcher"] == "ddp"
    assert crashed["reason"].startswith("rank 1 of 2 failed: RuntimeError: injected failure on rank 1"), crashed["reason"]
    assert "ddp_helpers.py" in crashed["traceback"]  # the failing rank's own traceback
    assert "rank 1 of 2 failed" in proc.stderr
    # launcher.timeout_s is 600: the crashed job ended on the crash, not by waiting out a collective (its
    # seconds by its own files: its Hydra record, written as it starts, to its metrics.json).
    job = sweep_dir / "2"
    elapsed = (job / "metrics.json").stat().st_mtime - (job / ".hydra" / "hydra.yaml").stat().st_mtime
    assert elapsed < 300, elapsed
    assert unused["status"] == "failed" and "set launcher.find_unused_parameters=true" in unused["reason"], unused
    assert found["status"] == "ok" and found["steps"] == 4


def test_under_torchrun_fastpipe_joins_the_group_and_writes_one_run_folder(tmp_path):
    """Also the DDP settings reaching the wrapper (gradients rounded to bf16 in 1 MB buckets), as graph.txt
    says (benchmarks/ddp.py's variants set them)."""
    # No fixed hydra.run.dir: every rank's Hydra picks a folder; all record in rank 0's.
    proc = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                 "-m", "fastpipe", "launcher=ddp", "dataset.num_images=200", "train.batch_size=16",
                 "train.max_steps=8", "launcher.comm_hook=bf16", "launcher.bucket_cap_mb=1", *SMALL], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = list((tmp_path / "outputs").rglob("metrics.json"))
    assert len(files) == 1, files
    metrics = json.loads(files[0].read_text())
    assert metrics["status"] == "ok" and metrics["env"]["world_size"] == 2 and metrics["throughput"] > 0
    assert len(metrics["per_rank"]["throughput"]) == 2
    assert proc.stdout.count("fastpipe run summary") == 1  # rank 0 prints; the others stay quiet
    assert "bucket_cap_mb=1  comm_hook=bf16" in (files[0].parent / "graph.txt").read_text()


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
    proc = in_process([*STREAM, "launcher=ddp", "launcher.nproc_per_node=2", "train.epochs=2",
                       f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["status"] == "ok" and m["steps"] == 2 * (96 // 2 // 8) and m["env"]["world_size"] == 2
