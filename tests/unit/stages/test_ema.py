"""EMA of the weights: the average a hand computation gives."""
from __future__ import annotations

import torch

from fastpipe.stages.ema import build_ema


# ------------------------------------------------------------------ EMA
def test_ema_equals_a_hand_computation():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    ema = build_ema(model, 0.9)
    hand = None
    for step in range(5):
        with torch.no_grad():
            model[0].weight.add_(torch.randn_like(model[0].weight))
        model(torch.randn(8, 3))  # BatchNorm's running statistics move too
        ema.update_parameters(model)
        now = [t.detach().clone() for t in list(model.parameters()) + list(model.buffers()) if t.is_floating_point()]
        hand = now if hand is None else [0.9 * h + 0.1 * n for h, n in zip(hand, now)]
    mine = [t for t in list(ema.module.parameters()) + list(ema.module.buffers()) if t.is_floating_point()]
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(mine, hand))
    assert ema.count == 5 and int(ema.n_averaged) == 5
