"""launcher=fsdp (issue 17): FSDP2 on the CPU with gloo ranks, sharded checkpoints, the converter.

FSDP2 (``fully_shard``), DTensor state dicts and torch.distributed.checkpoint all run on the CPU with
gloo in the pinned torch, so everything here is tested for real: the slow tests train a tiny GPT on
two ranks, resume its sharded checkpoint on one rank (under fsdp and under single), fall back past
a damaged one and consolidate it into the file a user loads for inference.
"""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import torch
from conftest import in_process
from lm_helpers import corpus_glob

from fastpipe.checkpoint.disk import checkpoints_in, verify
from fastpipe.models import GPT

def _lm(files: str, *extra, epochs: int = 1) -> list:
    """A tiny LM run: 2-layer gpt_tiny, 64 windows of 16 tokens per epoch (8 steps on two ranks)."""
    return ["task=lm", "dataset=tokens", f"dataset.files={files}", "dataset.seq_len=16",
            "dataset.windows_per_epoch=64", "model=gpt_tiny", "model.n_layer=2", "train.batch_size=4",
            f"train.epochs={epochs}", "measure.warmup_steps=1", "measure.window=2", "runtime.progress=false",
            "data.num_workers=0", "device=cpu", *extra]


def _run(args) -> subprocess.CompletedProcess:
    """``python -m fastpipe ARGS`` in this process; launcher=fsdp's ranks are the processes it starts."""
    return in_process(args)


# ---------------------------------------------------------------- two gloo ranks (slow)
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 2-rank FSDP run of a tiny GPT with bf16 mixed precision and activation checkpointing,
    checkpointing every 3 of its 8 steps."""
    root = tmp_path_factory.mktemp("fsdp")
    files = corpus_glob(root / "corpus")
    run = root / "run"
    proc = _run([*_lm(files, "launcher=fsdp", "precision=amp", "model.activation_checkpointing=true",
                                        "train.max_steps=8", "train.checkpoint_every=3", "train.keep_checkpoints=2",
                                        f"hydra.run.dir={run}")])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return files, run, proc


def test_two_ranks_train_and_write_sharded_checkpoints(trained):
    files, run, proc = trained
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "ok" and metrics["env"]["world_size"] == 2, metrics.get("reason")
    assert metrics["steps"] == 8 and len(metrics["per_rank"]["peak_mem_gb"]) == 2
    assert metrics["val_metrics"]["loss"] < 5.0  # below uniform over 256 byte tokens (5.55 nats)
    graph = (run / "graph.txt").read_text()
    assert "FSDP2  2 units (Block) + root" in graph and "MixedPrecisionPolicy" in graph
    names = [p.name for p in checkpoints_in(run / "checkpoints")]
    assert names == ["step-00000008.dcp", "step-00000006.dcp"]  # keep_checkpoints=2; step 3 rotated away
    shards = sorted(p.name for p in (run / "checkpoints" / names[0]).iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp", "train_state.pt"]  # each rank its own
    assert all(verify(run / "checkpoints" / n) is None for n in names)
    last = torch.load(run / "checkpoints" / "last.pt", weights_only=True)["model"]  # gathered for fastpipe.load
    assert torch.equal(last["lm_head.weight"], last["wte.weight"])  # still tied after sharding


def test_consolidated_checkpoint_holds_the_last_weights_and_loads(trained, tmp_path):
    import fastpipe

    _, run, _ = trained
    out = tmp_path / "model.pt"
    from fastpipe.cli.consolidate import main as consolidate

    assert consolidate([str(run), str(out)]) == 0
    consolidated = torch.load(out, weights_only=True)
    last = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    assert consolidated["step"] == last["step"] == 8
    assert consolidated["model"].keys() == last["model"].keys()
    for name, tensor in last["model"].items():
        assert torch.equal(consolidated["model"][name], tensor), name
    model = fastpipe.load(run, "last").model  # the gathered weights rebuild the model
    assert isinstance(model, GPT) and verify(out) is None


def test_sharded_checkpoint_resumes_on_one_rank_under_fsdp_and_single(trained, tmp_path):
    files, run, _ = trained
    newest = run / "checkpoints" / "step-00000008.dcp"
    for launcher in ("launcher=fsdp", "launcher=single"):
        resumed = tmp_path / launcher.split("=")[1]
        # one rank takes 4 samples per step where two took 8: step 8 of the old run is step 16 here,
        # the end of the first of two 16-step epochs
        proc = _run([*_lm(files, launcher, "launcher.nproc_per_node=1" if "fsdp" in launcher else
                                            "launcher.fresh_process=auto", "precision=amp", "train.max_steps=18",
                                            f"train.resume={newest}", f"hydra.run.dir={resumed}", epochs=2)])
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "at step 16" in proc.stderr, proc.stderr[-2000:]
        metrics = json.loads((resumed / "metrics.json").read_text())
        assert metrics["status"] == "ok" and metrics["steps"] == 18


def test_a_damaged_sharded_checkpoint_falls_back_to_the_older_one(trained, tmp_path):
    files, run, _ = trained
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    shard = copy / "checkpoints" / "step-00000008.dcp" / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[:-10])  # truncated
    proc = _run([*_lm(files, "launcher=fsdp", "precision=amp", "model.activation_checkpointing=true",
                                        "train.max_steps=9", "train.resume=auto", f"hydra.run.dir={copy}")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step-00000008.dcp is not loadable" in proc.stderr and "from " in proc.stderr
    assert "resuming from" in proc.stderr and "step-00000006.dcp at step 6" in proc.stderr
