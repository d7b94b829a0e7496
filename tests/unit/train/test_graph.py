"""The stage builder refuses combinations that cannot work, naming the fix."""
from __future__ import annotations

import pytest

from fastpipe.errors import ConfigError

from conftest import TINY, cpu_runtime, make_settings
from lm_helpers import corpus_glob


def test_gpt_on_an_image_dataset_says_it_needs_a_vocabulary(monkeypatch):
    from fastpipe.train import graph

    s = make_settings(TINY + ["model=gpt"])  # task=classification: the settings are fine, the model is not
    with pytest.raises(ConfigError, match=r"model=\w+ needs vocab_size, which the dataset does not give; .*"
                                          r"set model.vocab_size=N"):
        graph.build(s, cpu_runtime())


def _lm(files: str, *extra, epochs: int = 1) -> list:
    """A tiny LM run: 2-layer gpt_tiny, 64 windows of 16 tokens per epoch (8 steps on two ranks)."""
    return ["task=lm", "dataset=tokens", f"dataset.files={files}", "dataset.seq_len=16",
            "dataset.windows_per_epoch=64", "model=gpt_tiny", "model.n_layer=2", "train.batch_size=4",
            f"train.epochs={epochs}", "measure.warmup_steps=1", "measure.window=2", "runtime.progress=false",
            "data.num_workers=0", "device=cpu", *extra]


def test_ema_under_fsdp_is_refused_with_the_fix(tmp_path):
    from conftest import cpu_runtime

    from fastpipe.train import graph

    s = make_settings(_lm(corpus_glob(tmp_path / "c"), "launcher=fsdp", "train.ema_decay=0.99"))
    with pytest.raises(ConfigError, match="ema_decay.*launcher=fsdp"):
        graph.build(s, cpu_runtime())
