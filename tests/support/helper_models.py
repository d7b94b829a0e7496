"""Models for tests, importable by dotted path (model._target_=helper_models.X with tests/support on the path)."""
from __future__ import annotations

import torch

from fastpipe.models import TinyCNN


class GraphBreakCNN(TinyCNN):
    """TinyCNN with a data-dependent Python branch: torch.compile(fullgraph=True) must fail on it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        if out.sum().item() > 1e30:  # .item() forces a graph break
            out = out * 2
        return out


def not_a_module(num_classes: int = 2):
    return object()
