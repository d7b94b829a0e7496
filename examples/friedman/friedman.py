"""A tabular regression project for fastpipe: Friedman's #1 benchmark problem, an MLP, an MSE task.

fastpipe imports this module by the ``_target_`` names in conf/ (the working folder is importable).
"""
from __future__ import annotations

import math
from typing import Dict, Sequence

import torch
from torch import nn
from torch.utils.data import Dataset


class Friedman1(Dataset):
    """Friedman (1991) #1: ``y = 10 sin(pi x1 x2) + 20 (x3 - 0.5)^2 + 10 x4 + 5 x5 + noise``, x ~ U(0, 1)^d.

    Only the first five of ``num_features`` inputs matter. A sample is (float32[num_features],
    float32[1]); the same seed always gives the same data. fastpipe holds out ``dataset.val_fraction``.
    """

    def __init__(self, num_samples: int = 8000, num_features: int = 10, noise: float = 1.0, seed: int = 0) -> None:
        if num_features < 5:
            raise ValueError(f"num_features={num_features}: Friedman #1 needs at least 5")
        g = torch.Generator().manual_seed(seed)
        self.x = torch.rand(num_samples, num_features, generator=g)
        x = self.x
        y = (10 * torch.sin(math.pi * x[:, 0] * x[:, 1]) + 20 * (x[:, 2] - 0.5) ** 2 + 10 * x[:, 3] + 5 * x[:, 4])
        self.y = (y + noise * torch.randn(num_samples, generator=g)).unsqueeze(1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int):
        return self.x[index], self.y[index]


class MLP(nn.Module):
    """Fully connected layers with GELU between them."""

    def __init__(self, in_features: int = 10, hidden: Sequence[int] = (64, 64), out_features: int = 1) -> None:
        super().__init__()
        sizes, layers = [in_features, *hidden], []
        for a, b in zip(sizes, sizes[1:]):
            layers += [nn.Linear(a, b), nn.GELU()]
        self.net = nn.Sequential(*layers, nn.Linear(sizes[-1], out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class MSE:
    """Mean squared error; held-out mse (the primary metric, lower is better), mae and rmse."""

    primary = "mse"
    higher_is_better = False

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(output.float(), target)

    def metrics(self, output: torch.Tensor, target: torch.Tensor) -> Dict[str, torch.Tensor]:
        error = output.float() - target
        return {"mse": error.square().mean(1).sum(), "mae": error.abs().mean(1).sum()}

    def summarize(self, means: Dict[str, float]) -> Dict[str, float]:
        return {"rmse": math.sqrt(means["mse"])}
