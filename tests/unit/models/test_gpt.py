"""The GPT model: shapes, the tied head, FLOPs, GPT-2 small's size, activation checkpointing, meta-device init."""
from __future__ import annotations

import pytest
import torch

from fastpipe.models import GPT, build_model, enable_activation_checkpointing

from conftest import make_settings
from lm_helpers import gpt_params


def test_gpt_shapes_tied_head_flops_and_length_limit():
    torch.manual_seed(0)
    model = GPT(vocab_size=37, seq_len=12, n_layer=2, n_head=2, n_embd=16)
    tokens_in = torch.randint(0, 37, (3, 9))
    assert model(tokens_in).shape == (3, 9, 37)
    assert model.lm_head.weight is model.wte.weight
    total, n = gpt_params(37, 12, 2, 16)
    assert sum(p.numel() for p in model.parameters()) == total
    for t in (9, 12):  # per token 6N + 12 * n_layer * n_embd * T, times T tokens
        assert model.flops_per_sample(torch.zeros(2, t, dtype=torch.long)) == t * (6 * n + 12 * 2 * 16 * t)
    with pytest.raises(ValueError, match="a sequence of 13 tokens is longer than the model's seq_len=12"):
        model(torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(ValueError, match="must be a multiple of n_head"):
        GPT(vocab_size=37, n_head=3, n_embd=16)


def test_gpt2_small_config_has_124m_parameters():
    s = make_settings(["task=lm", "dataset=synthetic", "dataset.vocab_size=50304", "dataset.seq_len=1024",
                       "model=gpt2_small"])
    with torch.device("meta"):  # 124M parameters, no memory
        model = build_model(s.model, {"vocab_size": 50304, "seq_len": 1024})
    assert (model.n_layer, model.n_head, model.n_embd, model.seq_len) == (12, 12, 768, 1024)
    count = sum(p.numel() for p in model.parameters())
    assert count == gpt_params(50304, 1024, 12, 768)[0] == 124_373_760 and round(count / 1e6) == 124


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
