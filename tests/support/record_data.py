"""A project's own datasets, model and task for the records-pack tests (tests/unit/data/test_records.py),
named by ``_target_: record_data.NAME`` from a temporary conf/ folder (tests/support is on the import path)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset


# ------------------------------------------------------------------ the project's own objects
class Vectors(Dataset):
    """``n`` samples ``(float32[4], int64 label)``: x = [i / 1024, i % 3, sin(i), 1] (x[0] names the
    sample exactly), label = i % 3 (a 0-d tensor by default; ``label_shape=[1]`` gives int64[1])."""

    def __init__(self, n: int = 60, label_shape: list = ()) -> None:
        self.n, self.label_shape = n, tuple(label_shape)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if not 0 <= i < self.n:
            raise IndexError(i)
        x = torch.tensor([i / 1024, i % 3, math.sin(i), 1.0], dtype=torch.float32)
        return x, torch.full(self.label_shape, i % 3, dtype=torch.int64)


class Nested(Dataset):
    """``((float32[3], int32[2]), {"y": label, "w": weight})``; ``scalars``: y a 0-d tensor and w a Python
    float (default collate: int64[B], float64[B]), else y int64[1] and w float64[2]."""

    def __init__(self, n: int = 40, scalars: bool = True) -> None:
        self.n, self.scalars = n, scalars

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if not 0 <= i < self.n:
            raise IndexError(i)
        inputs = (torch.full((3,), i / 2, dtype=torch.float32), torch.tensor([i, -i], dtype=torch.int32))
        if self.scalars:
            return inputs, {"y": torch.tensor(i % 2), "w": 0.25 * i}
        return inputs, {"y": torch.tensor([i % 2]), "w": torch.tensor([0.25 * i, -1.0], dtype=torch.float64)}


class Varying(Dataset):
    """Samples whose input length varies (1, 2 or 3 values): a records pack cannot hold them."""

    def __init__(self, n: int = 30) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return torch.ones(i % 3 + 1), torch.tensor([i % 2])


class Linear(nn.Module):
    def __init__(self, in_features: int = 4) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).squeeze(-1)


class MSE:
    """Regression onto the label: held-out mse (primary, lower is better) and rmse."""

    primary = "mse"
    higher_is_better = False

    def loss(self, output, target):
        return F.mse_loss(output.float(), target.float().reshape(output.shape))

    def metrics(self, output, target):
        return {"mse": ((output.float() - target.float().reshape(output.shape)) ** 2).sum()}

    def summarize(self, means):
        return {"rmse": means["mse"] ** 0.5}
