"""Checkpoint and resume: exact continuation, integrity fall-backs, rotation, SIGKILL, NaN guard."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import REPO, run_in_process

HERE = Path(__file__).resolve().parent
# fp32 on the CPU, no worker processes, no augmentation: bit-for-bit deterministic. 9 steps/epoch.
BASE = ["dataset.num_images=200", "dataset.image_size=16", "train.batch_size=16", "train.epochs=2",
        "measure.warmup_steps=2", "measure.window=3", "runtime.progress=false", "data.num_workers=0",
        "train.checkpoint_every=3",
        # constant: these tests stop a run early with max_steps, and a cosine schedule depends on
        # the run's total steps (a resumed run with the same max_steps follows the same schedule)
        "lr_schedule=constant"]
TOTAL = 14  # ends mid-epoch 2; half of it (7) is mid-epoch 1
SLOW = ["model._target_=fault_models.Slow", "+model.sleep_s=0.15"]  # time to act mid-run


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted run of TOTAL steps: the reference every resumed run must reproduce."""
    run_dir = tmp_path_factory.mktemp("straight")
    return run_dir, run_in_process(run_dir, BASE + [f"train.max_steps={TOTAL}"])


def weights(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


def assert_same_run(metrics: dict, reference: dict) -> None:
    """Same step count, and losses/accuracy equal to the reference within 1e-6."""
    assert metrics["status"] == "ok" and metrics["steps"] == reference["steps"] == TOTAL
    for key in ("final_loss", "val_loss", "accuracy"):
        assert abs(metrics[key] - reference[key]) <= 1e-6, key


def test_straight_run_keeps_the_last_k_checkpoints(straight):
    run_dir, metrics = straight
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    # every 3 steps plus the final one (14); train.keep_checkpoints=3 keeps the newest three, beside
    # the weights files of train.save_weights (never rotated)
    weights = [f"{w}.{ext}" for w in ("best", "last") for ext in ("json", "pt")]
    assert names == weights + [f"step-{s:08d}.{ext}" for s in (9, 12, 14) for ext in ("json", "pt")]
    assert metrics["checkpoint_stall_s"]["count"] == 5  # steps 3, 6, 9, 12 and 14
    assert metrics["checkpoint"] == str(run_dir / "checkpoints" / "step-00000014.pt")
    state = torch.load(run_dir / "checkpoints" / "step-00000014.pt", weights_only=True)
    evaluation = state["position"].pop("evaluation")  # epoch 1's evaluation (step 9), the only one before it
    assert evaluation["best"]["step"] == 9 and evaluation["since_best"] == 0
    assert state["position"] == {"epoch": 1, "step_in_epoch": 5, "step": 14, "nonfinite_steps": 0,
                                 "final_loss": pytest.approx(metrics["final_loss"], abs=1e-6),
                                 "samples_in_epoch": 5 * 16, "samples_seen": 14 * 16}  # batch 16, one process
    assert set(state["rng"][0]) == {"python", "numpy", "torch", "cuda"}


def test_half_then_resume_equals_straight(straight, tmp_path):
    ref_dir, reference = straight
    first = run_in_process(tmp_path, BASE + [f"train.max_steps={TOTAL // 2}"])
    assert first["steps"] == TOTAL // 2
    resumed = run_in_process(tmp_path, BASE + [f"train.max_steps={TOTAL}", "train.resume=auto"])
    assert_same_run(resumed, reference)
    assert any("resuming from" in w and "at step 7" in w for w in resumed["warnings"])
    ours, theirs = weights(tmp_path / "checkpoints/step-00000014.pt"), weights(ref_dir / "checkpoints/step-00000014.pt")
    assert all(torch.allclose(ours[k].float(), theirs[k].float(), atol=1e-6, rtol=0) for k in theirs)


def test_resume_from_a_file_at_an_epoch_boundary_with_workers(straight, tmp_path):
    ref_dir, reference = straight
    path = ref_dir / "checkpoints" / "step-00000009.pt"  # the end of epoch 1, before its evaluation
    resumed = run_in_process(tmp_path, BASE + [f"train.max_steps={TOTAL}", f"train.resume={path}",
                                               "data.num_workers=1"])  # the order does not depend on workers
    assert_same_run(resumed, reference)


def test_corrupt_newest_checkpoint_falls_back_to_the_previous_one(straight, tmp_path):
    ref_dir, reference = straight
    shutil.copytree(ref_dir / "checkpoints", tmp_path / "checkpoints")
    newest = tmp_path / "checkpoints" / "step-00000014.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # truncated
    resumed = run_in_process(tmp_path, BASE + [f"train.max_steps={TOTAL}", "train.resume=auto"])
    assert any("step-00000014.pt is not loadable" in w and "truncated" in w and "previous" in w
               for w in resumed["warnings"])
    assert any("resuming from" in w and "step-00000012.pt at step 12" in w for w in resumed["warnings"])
    assert_same_run(resumed, reference)


def test_a_file_that_torch_cannot_load_is_skipped_even_with_a_matching_sidecar(straight, tmp_path):
    from fastpipe.checkpoint.files import sha256, load_verified

    ref_dir, _ = straight
    good = ref_dir / "checkpoints" / "step-00000012.pt"
    bad = tmp_path / "step-00000013.pt"
    bad.write_bytes(b"not a zip file")
    (tmp_path / "step-00000013.json").write_text('{"bytes": 14, "sha256": "%s"}' % sha256(bad))
    said = []
    path, state = load_verified([bad, good], said.append)
    assert path == good and state["position"]["step"] == 12
    assert "torch.load failed" in said[0] and "falling back" in said[0]


def test_fresh_start_refuses_a_folder_with_checkpoints(straight, tmp_path):
    from fastpipe.errors import ConfigError

    ref_dir, _ = straight
    shutil.copytree(ref_dir / "checkpoints", tmp_path / "checkpoints")
    with pytest.raises(ConfigError, match="holds checkpoints of an earlier run: add train.resume=auto"):
        run_in_process(tmp_path, BASE + ["train.max_steps=2"])


def test_nonfinite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    from fastpipe.errors import TrainingError
    from fastpipe.record.results import read as read_metrics

    overrides = BASE + ["model._target_=fault_models.NaNAfter", "+model.after=5",
                        "train.checkpoint_every=2", "train.max_nonfinite_steps=4"]
    with pytest.raises(TrainingError, match="non-finite for 7 steps in a row"):
        run_in_process(tmp_path, overrides)
    metrics = read_metrics(tmp_path)
    # NaN from step 6; the streak is read at window edges (steps 2, 5, 8; the epoch's end at 9 closes
    # a window, so then 12): 7 >= 4 at step 12
    assert metrics["status"] == "failed" and metrics["steps"] == 12 and metrics["nonfinite_steps"] == 7
    last_good = tmp_path / "checkpoints" / "step-00000004.pt"
    assert metrics["checkpoint"] == str(last_good) and str(last_good) in metrics["reason"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*.pt")) == ["step-00000002.pt", "step-00000004.pt"]
    assert all(torch.isfinite(t.float()).all() for t in weights(last_good).values())


def _start(run_dir: Path, extra, code=None) -> subprocess.Popen:
    """``python -m fastpipe`` (or a driver ``code``) training in ``run_dir``, stderr piped."""
    args = BASE + [f"train.max_steps={TOTAL}", f"hydra.run.dir={run_dir}", *extra]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(REPO)]))
    command = [sys.executable, "-m", "fastpipe"] if code is None else [sys.executable, "-c", code]
    return subprocess.Popen(command + args, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_for(path: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, f"training ended before {path.name}: {process.stderr.read().decode()[-2000:]}"
        assert time.monotonic() < deadline, f"no {path} after {timeout} s"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigkill_while_training_then_resume_completes(straight, tmp_path):
    _, reference = straight
    process = _start(tmp_path, ["launcher.fresh_process=false", *SLOW])
    _wait_for(tmp_path / "checkpoints" / "step-00000006.json", process)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    resumed = run_in_process(tmp_path, BASE + [f"train.max_steps={TOTAL}", "train.resume=auto"])
    assert any("resuming from" in w for w in resumed["warnings"])
    assert_same_run(resumed, reference)


# Runs fastpipe with the checkpoint write paused between fsync and rename at step 6.
KILL_IN_WRITE = """
import pathlib, sys, time
import fastpipe.checkpoint.files as files
def pause(tmp):
    if "step-00000006" in tmp.name:
        (tmp.parent.parent / "writing").write_text(tmp.name)
        time.sleep(120)
files._before_publish = pause
from fastpipe.__main__ import main
main()
"""


@pytest.mark.slow
def test_sigkill_while_writing_a_checkpoint_never_loads_the_partial_one(straight, tmp_path):
    _, reference = straight
    process = _start(tmp_path, ["launcher.fresh_process=false"], code=KILL_IN_WRITE)
    _wait_for(tmp_path / "writing", process)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    folder = tmp_path / "checkpoints"
    assert (folder / (tmp_path / "writing").read_text()).is_file()  # the complete-looking temporary file
    assert not (folder / "step-00000006.pt").exists()
    resumed = run_in_process(tmp_path, BASE + [f"train.max_steps={TOTAL}", "train.resume=auto"])
    assert any("step-00000003.pt at step 3" in w for w in resumed["warnings"])
    assert not list(folder.glob(".step-*"))  # the interrupted write was cleaned up
    assert_same_run(resumed, reference)


@pytest.mark.slow
def test_ddp_resume_continues_on_every_rank(tmp_path):
    """launcher=ddp, 2 CPU processes (gloo): stop at step 7, resume to 14 from rank 0's checkpoint."""
    from conftest import make_settings
    from fastpipe.launch.launcher import launch

    ddp = BASE + ["launcher=ddp", "launcher.nproc_per_node=2", "train.batch_size=8"]  # 9 steps/epoch/rank
    first = launch(make_settings(ddp + ["train.max_steps=7"]), tmp_path)
    assert first["status"] == "ok" and first["steps"] == 7 and first["env"]["world_size"] == 2
    state = torch.load(tmp_path / "checkpoints" / "step-00000007.pt", weights_only=True)
    assert len(state["rng"]) == 2 and state["meta"]["world_size"] == 2  # every rank's RNG states
    assert not torch.equal(state["rng"][0]["torch"], state["rng"][1]["torch"])
    resumed = launch(make_settings(ddp + [f"train.max_steps={TOTAL}", "train.resume=auto"]), tmp_path)
    assert resumed["status"] == "ok" and resumed["steps"] == TOTAL and resumed["env"]["world_size"] == 2
    assert any("resuming from" in w and "at step 7 (epoch 1, step 7 of 9)" in w for w in resumed["warnings"])
    assert resumed["accuracy"] is not None and resumed["nonfinite_steps"] == 0
    final = torch.load(tmp_path / "checkpoints" / "step-00000014.pt", weights_only=True)
    assert final["position"]["step"] == TOTAL and final["position"]["epoch"] == 1


def test_a_checkpoint_with_other_parameter_groups_is_refused_in_one_line(tmp_path):
    from fastpipe.errors import DataError

    run_in_process(tmp_path, BASE + ["optimizer=adamw", "train.no_decay=false", "train.max_steps=3"])
    with pytest.raises(DataError, match=r"its optimizer state has 1 parameter group\(s\), this run's optimizer 2 "
                                        r".*resume with the train.no_decay the checkpoint was written with"):
        run_in_process(tmp_path, BASE + ["optimizer=adamw", "train.max_steps=6", "train.resume=auto"])


def test_the_host_snapshot_keeps_tied_weights_as_one_tensor(tmp_path):
    """A GPT's tied embedding and head are one copy in the snapshot and in the file, as torch.save of the
    live state dict stores them; untied tensors of the same shape stay apart."""
    from fastpipe.checkpoint.writer import HostSnapshot
    from fastpipe.models import GPT

    model = GPT(vocab_size=64, seq_len=8, n_layer=1, n_head=2, n_embd=16)
    snapshot = HostSnapshot()
    for _ in range(2):  # the second snapshot reuses the buffers
        host = snapshot.take({"model": model.state_dict()})["model"]
        assert host["lm_head.weight"] is host["wte.weight"] and torch.equal(host["wte.weight"], model.wte.weight)
    others = [k for k in host if k not in ("wte.weight", "lm_head.weight")]
    assert others and all(host[k] is not host["wte.weight"] for k in others)
    assert len({id(host[k]) for k in others}) == len(others)
    live, snap = tmp_path / "live.pt", tmp_path / "snap.pt"
    torch.save(model.state_dict(), live)
    torch.save(host, snap)
    assert abs(snap.stat().st_size - live.stat().st_size) < 4096
