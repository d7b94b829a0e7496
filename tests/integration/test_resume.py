"""Checkpoint and resume in this process: exact continuation, integrity fall-backs, rotation, the NaN
guard, resumes that change the batch, checkpoints that do not fit. (Under SIGKILL and on DDP ranks:
tests/integration/test_checkpoint.py.)"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from conftest import RESUMABLE, RESUMABLE_TOTAL, assert_same_run, run_in_process
from fastpipe.errors import DataError, TrainingError
from fastpipe.record.results import read as read_metrics

from unit.conftest import run_composed


def weights(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


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
    first = run_in_process(tmp_path, RESUMABLE + [f"train.max_steps={RESUMABLE_TOTAL // 2}"])
    assert first["steps"] == RESUMABLE_TOTAL // 2
    resumed = run_in_process(tmp_path, RESUMABLE + [f"train.max_steps={RESUMABLE_TOTAL}", "train.resume=auto"])
    assert_same_run(resumed, reference)
    assert any("resuming from" in w and "at step 7" in w for w in resumed["warnings"])
    ours, theirs = weights(tmp_path / "checkpoints/step-00000014.pt"), weights(ref_dir / "checkpoints/step-00000014.pt")
    assert all(torch.allclose(ours[k].float(), theirs[k].float(), atol=1e-6, rtol=0) for k in theirs)


def test_resume_from_a_file_at_an_epoch_boundary_with_workers(straight, tmp_path):
    ref_dir, reference = straight
    path = ref_dir / "checkpoints" / "step-00000009.pt"  # the end of epoch 1, before its evaluation
    resumed = run_in_process(tmp_path, RESUMABLE + [f"train.max_steps={RESUMABLE_TOTAL}", f"train.resume={path}",
                                               "data.num_workers=1"])  # the order does not depend on workers
    assert_same_run(resumed, reference)


def test_corrupt_newest_checkpoint_falls_back_to_the_previous_one(straight, tmp_path):
    ref_dir, reference = straight
    shutil.copytree(ref_dir / "checkpoints", tmp_path / "checkpoints")
    newest = tmp_path / "checkpoints" / "step-00000014.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # truncated
    resumed = run_in_process(tmp_path, RESUMABLE + [f"train.max_steps={RESUMABLE_TOTAL}", "train.resume=auto"])
    assert any("step-00000014.pt is not loadable" in w and "truncated" in w and "previous" in w
               for w in resumed["warnings"])
    assert any("resuming from" in w and "step-00000012.pt at step 12" in w for w in resumed["warnings"])
    assert_same_run(resumed, reference)


def test_a_file_that_torch_cannot_load_is_skipped_even_with_a_matching_sidecar(straight, tmp_path):
    from fastpipe.checkpoint.disk import sha256, load_verified

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
        run_in_process(tmp_path, RESUMABLE + ["train.max_steps=2"])


def test_nonfinite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    from fastpipe.errors import TrainingError
    from fastpipe.record.results import read as read_metrics

    overrides = RESUMABLE + ["model._target_=fault_models.NaNAfter", "+model.after=5",
                        "train.checkpoint_every=2", "train.max_nonfinite_steps=4"]
    with pytest.raises(TrainingError, match="non-finite for 4 steps in a row"):
        run_in_process(tmp_path, overrides)
    metrics = read_metrics(tmp_path)
    # NaN from step 6; the streak is read where the host syncs: window edges (steps 2, 5, 8) and the
    # epoch's end (step 9): 4 >= 4 at step 9
    assert metrics["status"] == "failed" and metrics["steps"] == 9 and metrics["nonfinite_steps"] == 4
    last_good = tmp_path / "checkpoints" / "step-00000004.pt"
    assert metrics["checkpoint"] == str(last_good) and str(last_good) in metrics["reason"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*.pt")) == ["step-00000002.pt", "step-00000004.pt"]
    assert all(torch.isfinite(t.float()).all() for t in weights(last_good).values())


def test_a_checkpoint_with_other_parameter_groups_is_refused_in_one_line(tmp_path):
    from fastpipe.errors import DataError

    run_in_process(tmp_path, RESUMABLE + ["optimizer=adamw", "train.no_decay=false", "train.max_steps=3"])
    with pytest.raises(DataError, match=r"its optimizer state has 1 parameter group\(s\), this run's optimizer 2 "
                                        r".*resume with the train.no_decay the checkpoint was written with"):
        run_in_process(tmp_path, RESUMABLE + ["optimizer=adamw", "train.max_steps=6", "train.resume=auto"])


def test_the_host_snapshot_keeps_tied_weights_as_one_tensor(tmp_path):
    """A GPT's tied embedding and head are one copy in the snapshot and in the file, as torch.save of the
    live state dict stores them; untied tensors of the same shape stay apart."""
    from fastpipe.checkpoint.background import HostSnapshot
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


# ------------------------------------------------------------------ poisoned checkpoints
def test_a_checkpoint_is_written_only_from_finite_weights(tmp_path):
    """SGD at lr 1e6: the loss is finite at first but the updates blow the weights up. The error names
    a checkpoint whose weights are all finite, and it is still on disk."""
    with pytest.raises(TrainingError) as excinfo:
        run_in_process(tmp_path, RESUMABLE + ["optimizer=sgd", "optimizer.lr=1e6", "train.checkpoint_every=1",
                                         "train.max_nonfinite_steps=2", "train.keep_checkpoints=1",
                                         "train.max_steps=20"])
    message = str(excinfo.value)
    assert "the last good checkpoint is" in message
    named = Path(message.rsplit("the last good checkpoint is ", 1)[1].split()[0])
    assert named.is_file()
    state = torch.load(named, map_location="cpu", weights_only=True)
    assert all(torch.isfinite(t).all() for t in state["model"].values() if t.is_floating_point())
    assert read_metrics(tmp_path)["checkpoint"] == str(named)


# ------------------------------------------------------------------ resumes that change the batch
def test_a_resume_with_another_batch_size_goes_on_from_the_same_samples(tmp_path):
    first = run_composed(tmp_path, RESUMABLE + ["train.max_steps=7"])  # batch 16: 112 samples, 7 of 11 steps
    assert first["status"] == "ok" and first["steps"] == 7
    resumed = run_in_process(tmp_path, RESUMABLE + ["train.resume=auto", "train.batch_size=32"])
    assert resumed["status"] == "ok"
    assert resumed["steps"] == 5 + 3  # 112 samples = 3 steps of 32 (96) into epoch 1; 5 steps an epoch, 2 epochs
    assert any("it goes on after 112 samples of epoch 1 and 112 in all (step 3 here)" in w
               for w in resumed["warnings"]), resumed["warnings"]


def test_a_resume_past_the_new_end_trains_nothing_says_so_and_keeps_the_runs_record(tmp_path, capfd):
    from fastpipe.record.results import read as read_metrics

    first = run_in_process(tmp_path, RESUMABLE + ["train.max_steps=7", "train.checkpoint_every=7"])
    for _ in range(2):  # the same command again (a Slurm requeue), twice: the finished record stays
        again = run_composed(tmp_path, RESUMABLE + ["train.resume=auto", "train.max_steps=7", "train.checkpoint_every=7"])
        assert "at or past this run's end (step 7): nothing to train" in capfd.readouterr().err
        kept = read_metrics(tmp_path)
        for key in ("status", "steps", "throughput", "val_metrics", "best", "time_breakdown_s"):
            assert again[key] == kept[key] == first[key], key
    done = run_composed(tmp_path, RESUMABLE + ["train.resume=auto", "train.max_steps=5"])
    assert done["status"] == "ok" and done["steps"] == 7 and done["throughput"] == first["throughput"]
    assert "at or past this run's end (step 5): nothing to train" in capfd.readouterr().err
    (tmp_path / "metrics.json").unlink()
    (tmp_path / "metrics.previous.json").unlink(missing_ok=True)
    bare = run_composed(tmp_path, RESUMABLE + ["train.resume=auto", "train.max_steps=5"])  # no record to keep
    assert bare["status"] == "ok" and bare["throughput"] is None and "nothing to train" in bare["reason"]


# ------------------------------------------------------------------ loud failures, one line each
def test_resuming_another_models_checkpoint_says_what_it_holds(straight, tmp_path):
    shutil.copytree(straight[0] / "checkpoints", tmp_path / "checkpoints")  # a TinyCNN of width 32's
    with pytest.raises(DataError, match=r"does not fit this run's model fastpipe.models.TinyCNN: "
                                        r"features.0.0.weight is \[32, 3, 3, 3\] there, \[8, 3, 3, 3\] here"):
        run_in_process(tmp_path, RESUMABLE + ["train.resume=auto", "+model.width=8"])
    plain = tmp_path / "weights.pt"
    torch.save(torch.nn.Linear(2, 2).state_dict(), plain)
    with pytest.raises(DataError, match=r"weights.pt is not a fastpipe checkpoint \(it holds \w*Dict with keys "
                                        r"'bias', 'weight'\); train.resume takes"):
        run_in_process(tmp_path / "b", RESUMABLE + [f"train.resume={plain}"])


# ------------------------------------------------------------------ a finished run's folder keeps that run
def test_a_finished_runs_folder_is_refused_to_another_run_before_anything_is_touched(tmp_path, capsys):
    """hydra.run.dir of a finished run, another run's settings, no resume: one line and exit 2 as the run
    starts (RunGuard), before .hydra/ or any file of the finished run is written over."""
    from omegaconf import OmegaConf

    from fastpipe.report.callbacks import RunGuard

    run_composed(tmp_path, RESUMABLE + ["train.max_steps=3", "train.checkpoint_every=0"])
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(SystemExit) as exit_info:
        RunGuard().on_run_start(OmegaConf.create({"hydra": {"run": {"dir": str(tmp_path)}}, "train": {"resume": None}}))
    assert exit_info.value.code == 2
    said = capsys.readouterr().err.strip()
    assert said.startswith(f"fastpipe: error: hydra.run.dir={tmp_path} holds a finished run (metrics.json: status "
                           "ok, 3 steps, ") and said.endswith("fastpipe never writes another run over it; give this "
                           "run its own hydra.run.dir (without it, each run gets a new dated folder), add "
                           "train.resume=auto to continue that run, or remove the folder")
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    RunGuard().on_run_start(OmegaConf.create({"hydra": {"run": {"dir": str(tmp_path)}}, "train": {"resume": "auto"}}))


def test_resume_auto_on_a_finished_run_without_step_checkpoints_trains_nothing_and_keeps_it(tmp_path, capfd):
    """train.checkpoint_every=0 (the default) leaves no step checkpoint: resume=auto must not train the
    finished run again from step 0 over its weights and record."""
    first = run_composed(tmp_path, RESUMABLE + ["train.max_steps=3", "train.checkpoint_every=0"])
    weights = (tmp_path / "checkpoints" / "last.pt").read_bytes()
    again = run_in_process(tmp_path, RESUMABLE + ["train.max_steps=5", "train.checkpoint_every=0", "train.resume=auto"])
    assert (f"train.resume=auto: {tmp_path} holds a finished run (3 steps, status ok) and no step checkpoint to "
            "resume from (train.checkpoint_every=0 writes none): nothing to train") in capfd.readouterr().err
    for key in ("status", "steps", "throughput", "val_metrics", "best"):
        assert again[key] == read_metrics(tmp_path)[key] == first[key], key
    assert (tmp_path / "checkpoints" / "last.pt").read_bytes() == weights


def test_resuming_on_a_smaller_dataset_is_refused_in_one_line(tmp_path):
    """The position (samples into the epoch, its order) belongs to the split the checkpoint was written on."""
    run_composed(tmp_path, RESUMABLE + ["train.max_steps=7"])  # checkpoints at steps 3, 6, 7 (epoch 1: 9 steps)
    with pytest.raises(DataError, match=r"step-00000007.pt \(step 7, epoch 1\) was written on a training split of "
                                        r"1\d\d samples, and this run's holds \d\d: a resume goes on in the data it "
                                        r"stopped in; resume with the dataset settings it was written with, or start"):
        run_in_process(tmp_path, [o for o in RESUMABLE if "num_images" not in o] + ["dataset.num_images=60",
                                                                                     "train.resume=auto"])
    # a file from before checkpoints recorded the split's size: refused where its position is past this epoch
    from types import SimpleNamespace

    from fastpipe.checkpoint.state import check_same_data
    from conftest import make_settings

    g = SimpleNamespace(dataset=SimpleNamespace(train=range(60)), runtime=SimpleNamespace(dist=SimpleNamespace(world_size=1)))
    older = {"meta": {}, "position": {"epoch": 0, "step": 7, "samples_in_epoch": 112}}
    with pytest.raises(DataError, match=r"old.pt \(step 7, epoch 1\) was written 112 samples into epoch 1, past the end "
                                        r"of this run's epoch \(3 steps of 16 samples\)"):
        check_same_data(g, Path("old.pt"), older, 3, make_settings(RESUMABLE).train)
