"""launcher=fsdp's pieces: the units FSDP2 shards."""
from __future__ import annotations

import pytest
import torch

from fastpipe.errors import ConfigError
from fastpipe.models import GPT, TinyCNN


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


def test_init_covers_multihead_attention_and_refuses_parameters_nothing_initialises():
    """launcher=fsdp materialises the model from the meta device: every parameter must be initialised by
    a reset (nn.MultiheadAttention's is the private _reset_parameters) or the model's init_weights()."""
    import torch
    from torch import nn

    from fastpipe.errors import ConfigError
    from fastpipe.stages.fsdp import init_weights

    class Attends(nn.Module):
        def __init__(self, raw: bool) -> None:
            super().__init__()
            self.attn, self.head = nn.MultiheadAttention(8, 2), nn.Linear(8, 2)
            self.pos = nn.Parameter(torch.zeros(4, 8)) if raw else None

    for raw in (False, True):
        with torch.device("meta"):
            model = Attends(raw)
        model.to_empty(device="cpu")
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(float("nan"))  # what uninitialised memory may hold
        if raw:
            with pytest.raises(ConfigError, match=r"model=Attends .* but pos belong to modules without one: give the "
                                                  r"model an init_weights\(\) method"):
                init_weights(model)
        else:
            assert init_weights(model) == "each module's reset_parameters"
            assert all(torch.isfinite(p).all() for p in model.parameters())  # in_proj_weight included
