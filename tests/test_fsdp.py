"""launcher=fsdp (issue 17): FSDP2 on the CPU with gloo ranks, sharded checkpoints, the converter.

FSDP2 (``fully_shard``), DTensor state dicts and torch.distributed.checkpoint all run on the CPU with
gloo in the pinned torch, so everything here is tested for real: the slow tests train a tiny GPT on
two ranks, resume its sharded checkpoint on one rank (under fsdp and under single), fall back past
a damaged one and consolidate it into the file a user loads for inference.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO, make_settings

from fastpipe.checkpoint.files import checkpoints_in, resolve_candidates, rotate, verify
from fastpipe.errors import ConfigError, DataError
from fastpipe.models import GPT, TinyCNN, enable_activation_checkpointing

WORDS = "the quick brown fox jumps over the lazy dog while a small cat sleeps on the warm mat".split()


def _corpus(folder: Path) -> str:
    """Four small learnable text files (doc10 is the held-out one at val_fraction 0.05); their glob."""
    folder.mkdir(parents=True, exist_ok=True)
    for k, name in enumerate(("doc0.txt", "doc1.txt", "doc2.txt", "doc10.txt")):
        lines = [f"{k}.{i}: " + " ".join(WORDS[(i + j) % len(WORDS)] for j in range(6)) for i in range(40 + 8 * k)]
        (folder / name).write_text("\n".join(lines) + "\n")
    return str(folder / "*.txt")


def _lm(files: str, *extra, epochs: int = 1) -> list:
    """A tiny LM run: 2-layer gpt_tiny, 64 windows of 16 tokens per epoch (8 steps on two ranks)."""
    return ["task=lm", "dataset=tokens", f"dataset.files={files}", "dataset.seq_len=16",
            "dataset.windows_per_epoch=64", "model=gpt_tiny", "model.n_layer=2", "train.batch_size=4",
            f"train.epochs={epochs}", "measure.warmup_steps=1", "measure.window=2", "runtime.progress=false",
            "data.num_workers=0", "device=cpu", *extra]


def _run(args, timeout=500) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


# ---------------------------------------------------------------- config and pieces (fast)
def test_fsdp_launcher_has_its_own_keys_and_not_ddps():
    s = make_settings(["launcher=fsdp", "launcher.shard=[Block]", "launcher.reshard_after_forward=false"])
    assert (s.launcher.name, s.launcher.shard, s.launcher.reshard_after_forward) == ("fsdp", ["Block"], False)
    assert not hasattr(s.launcher, "bucket_cap_mb") and not hasattr(s.launcher, "static_graph")
    ddp_knob = make_settings(["launcher=fsdp", "launcher.bucket_cap_mb=5"])  # a DDP-only knob: dropped under fsdp
    assert not hasattr(ddp_knob.launcher, "bucket_cap_mb") and ddp_knob.notes == [
        "launcher.bucket_cap_mb=5 does not apply to launcher=fsdp (a key of launcher=ddp): ignored for this run"]
    with pytest.raises(ConfigError, match="launcher.shard"):
        make_settings(["launcher=fsdp", "launcher.shard=7"])


def test_units_are_the_repeated_blocks_or_the_named_classes_never_nested():
    from fastpipe.stages import fsdp

    gpt = GPT(64, 16, n_layer=3, n_head=2, n_embd=16)
    assert fsdp.units(gpt, "auto") == list(gpt.blocks)
    assert fsdp.units(gpt, ["Block"]) == list(gpt.blocks)
    attention_in_blocks = fsdp.units(gpt, ["Block", "SelfAttention"])  # attention sits inside each block
    assert attention_in_blocks == list(gpt.blocks)
    with pytest.raises(ConfigError, match="Blok"):
        fsdp.units(gpt, ["Blok"])
    with pytest.raises(ConfigError, match="launcher.shard"):
        fsdp.units(torch.nn.Linear(2, 2), "auto")
    assert len(fsdp.units(TinyCNN(), "auto")) == 3  # the conv blocks of its Sequential stage


def test_activation_checkpointing_keeps_parameter_names_and_wraps_the_given_blocks():
    gpt = GPT(64, 16, n_layer=2, n_head=2, n_embd=16)
    names = set(gpt.state_dict())
    assert enable_activation_checkpointing(gpt, [gpt.blocks[1]]) == 1
    assert set(gpt.state_dict()) == names  # a checkpoint loads with or without it
    assert type(gpt.blocks[1]).__name__ == "CheckpointWrapper" and type(gpt.blocks[0]).__name__ == "Block"
    gpt(torch.randint(0, 64, (2, 8))).sum().backward()
    assert all(p.grad is not None for p in gpt.parameters())


def test_gpt_init_weights_sets_every_tensor_of_a_meta_built_model():
    built = GPT(64, 16, n_layer=2, n_head=2, n_embd=16)
    torch.manual_seed(3)
    built.init_weights()
    with torch.device("meta"):
        meta = GPT(64, 16, n_layer=2, n_head=2, n_embd=16)
    meta.to_empty(device="cpu")  # uninitialised memory until init_weights
    meta.lm_head.weight = meta.wte.weight  # plain to_empty unties them (fully_shard's materialisation does not)
    torch.manual_seed(3)
    meta.init_weights()
    for (name, a), b in zip(built.state_dict().items(), meta.state_dict().values()):
        assert torch.equal(a, b), name


def test_fsdp_precision_is_the_policy_not_autocast():
    from fastpipe.config import PrecisionConfig
    from fastpipe.stages.fsdp import mixed_precision
    from fastpipe.stages.precision import build_precision

    p = build_precision(PrecisionConfig(name="amp"), torch.device("cpu"), by_fsdp=True)
    assert p.dtype is torch.bfloat16 and "MixedPrecisionPolicy" in p.describe()
    with p.autocast():
        assert not torch.is_autocast_enabled("cpu")
    policy = mixed_precision(p.dtype)
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
    assert mixed_precision(None) is None


def test_ema_under_fsdp_is_refused_with_the_fix(tmp_path):
    from conftest import cpu_runtime

    from fastpipe.train import graph

    s = make_settings(_lm(_corpus(tmp_path / "c"), "launcher=fsdp", "train.ema_decay=0.99"))
    with pytest.raises(ConfigError, match="ema_decay.*launcher=fsdp"):
        graph.build(s, cpu_runtime())


class _Ranks:
    """What evaluation.in_lockstep needs of a graph: other ranks simulated by fixed answers."""

    def __init__(self, world: int, having: int, others_more: list) -> None:
        self.dist, self.world_size = self, world  # HeldOut.dist: these ranks' collectives
        self.device = torch.device("cpu")
        self.having, self.others_more = having, list(others_more)

    def all_reduce_sum(self, t):
        return torch.tensor([float(self.having)])

    def any_rank(self, flag):  # one answer of the other rank per call
        other = self.others_more.pop(0) if self.others_more else False
        return torch.tensor(bool(flag) or other)


def test_evaluation_in_lockstep_repeats_the_last_batch_uncounted_while_others_go_on():
    from fastpipe.train.evaluation import in_lockstep

    pairs = list(in_lockstep(_Ranks(2, 2, [False, True, True, False]), iter(["a", "b"])))
    assert pairs == [("a", True), ("b", True), ("b", False), ("b", False)]
    with pytest.raises(ConfigError, match="no batch"):
        list(in_lockstep(_Ranks(2, 1, []), iter(["a"])))
    assert list(in_lockstep(_Ranks(2, 0, []), iter([]))) == []


def _fake_sharded(folder: Path, step: int) -> Path:
    """A published sharded checkpoint (two files and a sidecar), as checkpoint_dcp.publish writes it."""
    from fastpipe.checkpoint.dcp import publish

    partial = folder / f".step-{step:08d}.dcp.partial"
    partial.mkdir(parents=True)
    (partial / "__0_0.distcp").write_bytes(os.urandom(100))
    (partial / "train_state.pt").write_bytes(b"x" * 10)
    return publish(partial, folder / f"step-{step:08d}.dcp", {"step": step})


def test_sharded_checkpoint_folders_verify_rotate_and_resolve(tmp_path):
    first, second, third = (_fake_sharded(tmp_path, s) for s in (2, 4, 6))
    assert checkpoints_in(tmp_path) == [third, second, first] and verify(third) is None
    (third / "__0_0.distcp").write_bytes(os.urandom(100))  # same size, other bytes
    assert "SHA-256" in verify(third)
    (second / "__0_0.distcp").unlink()
    assert "missing" in verify(second)
    assert resolve_candidates(str(second), tmp_path) == [second, first]  # a given folder, then older ones
    (tmp_path / ".step-00000008.dcp.partial").mkdir()  # an interrupted save
    rotate(tmp_path, keep=1)
    assert checkpoints_in(tmp_path) == [third] and not (tmp_path / ".step-00000008.dcp.partial").exists()
    assert not (tmp_path / "step-00000002.json").exists()


def test_consolidate_refuses_what_it_cannot_convert(tmp_path):
    from fastpipe.cli.consolidate import consolidate

    with pytest.raises(ConfigError, match="not a sharded checkpoint"):
        consolidate(tmp_path / "nothing", tmp_path / "out.pt")
    with pytest.raises(DataError, match="no complete sharded checkpoint"):
        consolidate(tmp_path, tmp_path / "out.pt")
    bad = _fake_sharded(tmp_path / "checkpoints", 3)
    (bad / "train_state.pt").write_bytes(b"y" * 10)
    with pytest.raises(DataError, match="not a complete checkpoint"):
        consolidate(bad, tmp_path / "out.pt")


# ---------------------------------------------------------------- two gloo ranks (slow)
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 2-rank FSDP run of a tiny GPT with bf16 mixed precision and activation checkpointing,
    checkpointing every 3 of its 8 steps."""
    root = tmp_path_factory.mktemp("fsdp")
    files = _corpus(root / "corpus")
    run = root / "run"
    proc = _run(["-m", "fastpipe", *_lm(files, "launcher=fsdp", "precision=amp", "model.activation_checkpointing=true",
                                        "train.max_steps=8", "train.checkpoint_every=3", "train.keep_checkpoints=2",
                                        f"hydra.run.dir={run}")])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return files, run, proc


@pytest.mark.slow
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


@pytest.mark.slow
def test_consolidated_checkpoint_holds_the_last_weights_and_loads(trained, tmp_path):
    import fastpipe

    _, run, _ = trained
    out = tmp_path / "model.pt"
    proc = _run(["-m", "fastpipe.consolidate", str(run), str(out)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    consolidated = torch.load(out, weights_only=True)
    last = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    assert consolidated["step"] == last["step"] == 8
    assert consolidated["model"].keys() == last["model"].keys()
    for name, tensor in last["model"].items():
        assert torch.equal(consolidated["model"][name], tensor), name
    model = fastpipe.load(run, "last").model  # the gathered weights rebuild the model
    assert isinstance(model, GPT) and verify(out) is None


@pytest.mark.slow
def test_sharded_checkpoint_resumes_on_one_rank_under_fsdp_and_single(trained, tmp_path):
    files, run, _ = trained
    newest = run / "checkpoints" / "step-00000008.dcp"
    for launcher in ("launcher=fsdp", "launcher=single"):
        resumed = tmp_path / launcher.split("=")[1]
        # one rank takes 4 samples per step where two took 8: step 8 of the old run is step 16 here,
        # the end of the first of two 16-step epochs
        proc = _run(["-m", "fastpipe", *_lm(files, launcher, "launcher.nproc_per_node=1" if "fsdp" in launcher else
                                            "launcher.fresh_process=true", "precision=amp", "train.max_steps=18",
                                            f"train.resume={newest}", f"hydra.run.dir={resumed}", epochs=2)])
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "at step 16" in proc.stderr, proc.stderr[-2000:]
        metrics = json.loads((resumed / "metrics.json").read_text())
        assert metrics["status"] == "ok" and metrics["steps"] == 18


@pytest.mark.slow
def test_a_damaged_sharded_checkpoint_falls_back_to_the_older_one(trained, tmp_path):
    files, run, _ = trained
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    shard = copy / "checkpoints" / "step-00000008.dcp" / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[:-10])  # truncated
    proc = _run(["-m", "fastpipe", *_lm(files, "launcher=fsdp", "precision=amp", "model.activation_checkpointing=true",
                                        "train.max_steps=9", "train.resume=auto", f"hydra.run.dir={copy}")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step-00000008.dcp is not loadable" in proc.stderr and "from " in proc.stderr
    assert "resuming from" in proc.stderr and "step-00000006.dcp at step 6" in proc.stderr
