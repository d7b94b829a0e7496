"""A project's parts that do not fit together, one fault each (tests/unit/train/test_first_batch.py):
named by ``_target_`` in the configs ``project_conf`` writes (this folder is on the import path)."""
from __future__ import annotations

import torch
from torch.utils.data import Dataset, get_worker_info


class Tabular(Dataset):
    """64 samples of (float32[features], label in 0..1)."""

    num_classes = 2

    def __init__(self, features: int = 4) -> None:
        self.features = features

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int):
        return torch.full((self.features,), index / 64.0), index % 2


class Ragged(Tabular):
    """Samples whose feature count varies: torch's default collate cannot stack them."""

    def __getitem__(self, index: int):
        return torch.zeros(4 + index % 3), index % 2


def mismatched_splits():
    """Training samples of 4 features, held-out samples of 5."""
    return {"train": Tabular(4), "val": Tabular(5)}


class Tokens(Dataset):
    """Token sequences of ``seq_len`` over ``vocab_size`` ids (``declares``: whether it says so)."""

    seq_len = 16

    def __init__(self, vocab: int = 300, declares: bool = True) -> None:
        self.vocab = vocab
        if declares:
            self.vocab_size = vocab

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int):
        seq = (torch.arange(self.seq_len + 1) * (index + 1) * 7) % self.vocab
        seq[0] = self.vocab - 1  # every sample holds the largest id
        return seq[:-1], seq[1:]


def collate_in_workers(samples):
    """Collates in the training process, fails in a DataLoader worker with its own message."""
    if get_worker_info() is not None:
        raise ValueError("cannot pad these samples (bad_project's own message)")
    return torch.utils.data.default_collate(samples)


class Linear(torch.nn.Module):
    """A linear classifier of 4 features; ``returns``: what forward gives besides (or around) the logits."""

    def __init__(self, num_classes: int = 2, returns: str = "logits") -> None:
        super().__init__()
        self.linear, self.returns = torch.nn.Linear(4, num_classes), returns

    def forward(self, x):
        logits = self.linear(x)
        if self.returns == "tuple":
            return logits, x
        if self.returns == "dict":
            return {"logits": logits}
        return logits


class F1Task:
    """A classification task whose primary metric, f1, its metrics() never gives."""

    primary, higher_is_better = "f1", True

    def loss(self, output, target):
        return torch.nn.functional.cross_entropy(output, target)

    def metrics(self, output, target):
        return {"accuracy": (output.argmax(1) == target).sum()}


class NaNAccuracy(F1Task):
    """Its primary metric is NaN on every batch."""

    primary = "accuracy"

    def metrics(self, output, target):
        return {"accuracy": output.sum() * float("nan")}
