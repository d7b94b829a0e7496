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
