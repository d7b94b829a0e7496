"""Tasks: language modelling's loss, held-out sums and perplexity."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fastpipe.stages.tasks import LanguageModelling


# ------------------------------------------------------------------ task and model
def test_language_modelling_loss_metrics_and_perplexity():
    task = LanguageModelling()
    assert (task.primary, task.higher_is_better, task.dataset_kinds) == ("loss", False, ("tokens",))
    g = torch.Generator().manual_seed(0)
    logits, target = torch.randn(3, 5, 11, generator=g), torch.randint(0, 11, (3, 5), generator=g)
    expected = F.cross_entropy(logits.reshape(15, 11), target.reshape(15))
    assert torch.allclose(task.loss(logits, target), expected, atol=1e-6)
    per_token = -torch.log_softmax(logits.double(), -1).gather(-1, target[..., None]).squeeze(-1)
    sums = task.metrics(logits, target)
    assert set(sums) == {"loss"} and sums["loss"].dim() == 0
    assert float(sums["loss"]) / 3 == pytest.approx(float(per_token.mean()), rel=1e-5)  # equal lengths: per token
    means = {"loss": float(sums["loss"]) / 3}
    assert task.summarize(means)["perplexity"] == pytest.approx(math.exp(means["loss"]), rel=1e-12)
    assert task.summarize({"loss": 1e6})["perplexity"] > 1e300  # huge, not an OverflowError
    assert task.tokens(target) == 5
