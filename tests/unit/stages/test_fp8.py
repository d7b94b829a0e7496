"""precision=fp8 (issue 27): which layers torchao's float8 training takes, the refusals, an emulated run.

On the CPU torchao emulates the fp8 casts. An emulated, compiled fp8 run that trains is
tests/integration/test_large_models.py's (the benchmark's smoke mode runs it).
"""
from __future__ import annotations

import pytest
import torch
from conftest import make_settings

from fastpipe.config import Fp8PrecisionConfig
from fastpipe.errors import ConfigError, EnvironmentProblem, FastpipeWarning
from fastpipe.models import GPT, TinyCNN
from fastpipe.stages import fp8

pytest.importorskip("torchao")
from torchao.float8.float8_linear import Float8Linear  # noqa: E402

CPU = torch.device("cpu")
LM = ["task=lm", "model=gpt_tiny", "dataset=synthetic", "dataset.vocab_size=256", "dataset.seq_len=32",
      "dataset.num_images=64", "train.batch_size=8", "runtime.progress=false"]
FP8 = ["precision=fp8", "compile=default", "compile.backend=aot_eager"]


def _gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(vocab_size=256, seq_len=32, n_layer=2, n_head=4, n_embd=64)


def _fp8_modules(model) -> list:
    return [name for name, m in model.named_modules() if isinstance(m, Float8Linear)]


def test_auto_converts_every_untied_linear_whose_dims_are_multiples_of_16():
    model = _gpt()
    with pytest.warns(FastpipeWarning, match="emulation.*slower than bf16"):
        layers = fp8.convert_fp8(model, Fp8PrecisionConfig(), CPU)
    expected = [f"blocks.{i}.{part}" for i in range(2) for part in ("attn.qkv", "attn.proj", "mlp.0", "mlp.2")]
    assert layers.converted == expected == _fp8_modules(model)
    assert layers.kept == {"lm_head": "weight tied to wte.weight"} and layers.emulated
    assert model.lm_head.weight is model.wte.weight  # the tie survives
    text = layers.describe()
    assert "blocks.[0-1].attn.qkv, blocks.[0-1].attn.proj, blocks.[0-1].mlp.0, blocks.[0-1].mlp.2" in text
    assert "kept in bf16: lm_head (weight tied to wte.weight)" in text and "against the bf16 peak" in text


def test_a_list_converts_exactly_the_named_layers_and_bad_names_are_refused():
    model = _gpt()
    with pytest.warns(FastpipeWarning):
        layers = fp8.convert_fp8(model, Fp8PrecisionConfig(fp8_layers=["blocks.1.mlp.0", "blocks.1.mlp.2"],
                                                           recipe="rowwise"), CPU)
    assert _fp8_modules(model) == ["blocks.1.mlp.0", "blocks.1.mlp.2"] and layers.recipe == "rowwise"
    assert layers.kept["blocks.0.attn.qkv"] == "not in precision.fp8_layers"
    with pytest.raises(ConfigError, match="names blocks.9.mlp.0, which is not an nn.Linear of GPT"):
        fp8.convert_fp8(_gpt(), Fp8PrecisionConfig(fp8_layers=["blocks.9.mlp.0"]), CPU)
    with pytest.raises(ConfigError, match="names lm_head, which fp8 cannot take \\(weight tied to wte.weight\\)"):
        fp8.convert_fp8(_gpt(), Fp8PrecisionConfig(fp8_layers=["lm_head"]), CPU)


def test_a_model_with_no_convertible_layer_is_refused_naming_why():
    with pytest.raises(ConfigError, match="no layer of TinyCNN to run in fp8.*head.2 \\(10x128: not multiples of "
                                          "16\\).*use precision=amp"):
        fp8.convert_fp8(TinyCNN(num_classes=10), Fp8PrecisionConfig(), CPU)
    with pytest.raises(ConfigError, match="has no nn.Linear layer"):
        fp8.convert_fp8(torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3)), Fp8PrecisionConfig(), CPU)


def test_under_fsdp_the_tensorwise_weights_are_gathered_in_fp8_and_rowwise_ones_are_not():
    from torchao.float8.fsdp_utils import WeightWithDynamicFloat8CastTensor

    for recipe, gathered in (("tensorwise", True), ("rowwise", False)):
        with torch.device("meta"):  # as launcher=fsdp builds it, before sharding
            model = _gpt()
        with pytest.warns(FastpipeWarning):
            layers = fp8.convert_fp8(model, Fp8PrecisionConfig(recipe=recipe), CPU, by_fsdp=True)
        assert layers.fsdp_all_gather is gathered
        assert isinstance(model.blocks[0].mlp[0].weight, WeightWithDynamicFloat8CastTensor) is gathered
        assert ("weights all-gathered in fp8" in layers.describe(True)) is gathered
        assert "by FSDP2's MixedPrecisionPolicy (no autocast)" in layers.describe(True)


def test_refusals_compile_off_old_gpu_and_bad_keys(monkeypatch):
    with pytest.raises(ConfigError, match="precision=fp8 with compile=off.*slower than bf16.*compile=default"):
        make_settings(LM + ["precision=fp8"])
    for bad, key in (("precision.recipe=blockwise", "precision.recipe"), ("precision.fp8_layers=3", "fp8_layers"),
                     ("precision.fsdp_fp8_all_gather=maybe", "fsdp_fp8_all_gather")):
        with pytest.raises(ConfigError, match=key):
            make_settings(LM + FP8 + [bad])
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(EnvironmentProblem, match="compute capability >= 8.9.*A100-SXM4-80GB has 8.0"):
        fp8.convert_fp8(_gpt(), Fp8PrecisionConfig(), torch.device("cuda", 0))


def test_a_sweep_over_amp_and_fp8_takes_each_ones_keys_and_notes_the_others():
    amp = make_settings(["precision=amp", "precision.recipe=rowwise"])
    assert amp.dropped_keys == ["precision.recipe=rowwise does not apply to precision=amp (a key of precision=fp8): "
                                "ignored for this run"]
    fp8_run = make_settings(LM + FP8 + ["precision.tf32=true", "precision.recipe=rowwise"])
    assert fp8_run.precision.recipe == "rowwise" and "a key of precision=fp32 and precision=amp" in fp8_run.dropped_keys[0]



def test_multihead_attentions_out_proj_is_kept_as_it_is_never_called():
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn, self.mlp = torch.nn.MultiheadAttention(32, 2), torch.nn.Linear(32, 32)

    usable, refused = fp8.candidates(Block())
    assert usable == ["mlp"] and refused == {
        "attn.out_proj": "inside nn.MultiheadAttention, which never calls it (its weights stay bf16)"}
