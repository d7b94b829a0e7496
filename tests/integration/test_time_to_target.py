"""Time to target from the command line: two DDP ranks stop together; halving by time to target resumes
its promoted combinations from their own checkpoints (issue 22). CPU, gloo, tiny settings."""
from __future__ import annotations

import json
import subprocess

import pytest
from conftest import in_process

SMALL = ["dataset.num_images=240", "dataset.image_size=16", "train.batch_size=16", "measure.warmup_steps=2",
         "measure.window=3", "runtime.progress=false", "data.num_workers=0"]


def fastpipe(args) -> subprocess.CompletedProcess:
    """The command in this process; launcher=ddp's ranks are the processes torch's elastic launcher starts."""
    return in_process(args)


@pytest.mark.slow
def test_two_ddp_ranks_screen_the_target_together_and_stop_at_the_same_step(tmp_path):
    proc = fastpipe(["launcher=ddp", "launcher.nproc_per_node=2", "train.target=0.6", "train.eval_every=2",
                     "train.target_eval_samples=24", "train.max_steps=60", "train.epochs=20", *SMALL,
                     f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["env"]["world_size"] == 2 and m["stopped_by"] == "target" and m["target"]["reached"]
    assert m["per_rank"]["steps_run"] == [m["steps"], m["steps"]] and m["steps"] < 60  # every rank stopped there
    assert m["target"]["samples"] == m["steps"] * 16 * 2  # samples over both ranks


@pytest.mark.slow
def test_halving_by_time_to_target_resumes_the_promoted_combination_from_its_checkpoint(tmp_path):
    proc = fastpipe(["-m", "hydra/sweeper=halving", "hydra.sweeper.finalists=1", "hydra.sweeper.budget_s=0.5",
                     "hydra.sweeper.finalist_rounds=0",
                     "optimizer.lr=0.003,0.0003,0.0001", "report.objective=time_to_target", "train.target=0.99",
                     "train.eval_every=5", "train.max_steps=100", "train.epochs=20", "launcher.fresh_process=false", *SMALL,
                     f"hydra.sweep.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((tmp_path / "halving.json").read_text())
    (round1,) = record["rounds"]
    assert record["settings"]["mode"] == "time_to_target" and round1["budget_s"] == 0.5
    assert len(round1["kept"]) == len(round1["dropped"]) == 1, round1  # nobody reached 99 % or trained 100 steps in 0.5 s
    (kept,), (dropped,) = round1["kept"], round1["dropped"]
    before = json.loads((tmp_path / str(kept) / "metrics.previous.json").read_text())
    after = json.loads((tmp_path / str(kept) / "metrics.json").read_text())
    assert before["stopped_by"] == "time_budget" and after["status"] == "ok" and after["steps"] == 100
    assert any(f"at step {before['steps']} " in w for w in after["warnings"])  # from its own checkpoint
    assert after["per_rank"]["steps_run"] == [100 - before["steps"]]  # no step twice
    curve, earlier = after["target"]["curve"], before["target"]["curve"]
    # the clock goes on from the pause's checkpoint: the pause's own checkpoint write, which a run never
    # paused would not have made, is on the paused record's clock only
    assert curve[:len(earlier)] == earlier and curve[len(earlier)]["seconds"] > earlier[-1]["seconds"]
    run = after["time_breakdown_s"]  # the restart's start-up is not on the training clock
    assert after["target"]["seconds"] <= before["target"]["seconds"] + run["wall_s"] - run["setup"] + 0.05
    report = (tmp_path / "report.md").read_text()
    assert f"| {dropped} | " in report and "pruned: dropped in round 1 at 0.5 s of training" in report
    assert "halving by time to target: 3 combinations" in report
