"""A loader registered from outside fastpipe, as a project registers its own: the schema with its
registration, and the builder (docs/architecture.md, "Adding a choice to a closed group")."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fastpipe.config.registry import register


class ToyLoader:
    """Batches stacked from the dataset in the training process, in an order drawn from (seed, epoch)."""

    def __init__(self, dataset, batch_size: int, seed: int, device: torch.device, shuffle: bool) -> None:
        self.dataset, self.batch_size, self.seed, self.device, self.shuffle = dataset, batch_size, seed, device, shuffle
        self.epoch = 0

    def __len__(self) -> int:  # training: whole batches only; held-out: every sample
        n = len(self.dataset)
        return n // self.batch_size if self.shuffle else -(-n // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def describe(self) -> str:
        return f"toy  stacked in the training process  shuffle={self.shuffle}"

    def __iter__(self):
        n = len(self.dataset)
        order = (torch.randperm(n, generator=torch.Generator().manual_seed(self.seed * 1000 + self.epoch))
                 if self.shuffle else torch.arange(n))
        for b in range(len(self)):
            samples = [self.dataset[int(i)] for i in order[b * self.batch_size:(b + 1) * self.batch_size]]
            images = torch.stack([torch.as_tensor(image) for image, _ in samples]).float() / 255
            labels = torch.tensor([int(label) for _, label in samples])
            yield images.to(self.device), labels.to(self.device)


def build_toy_loader(cfg, splits, runtime, batch_size: int, seed: int, train: bool, channels_last: bool) -> ToyLoader:
    """data=toy's builder: the arguments every loader's builder takes."""
    dataset = splits.train if train else splits.val
    return ToyLoader(dataset, batch_size, seed + runtime.dist.rank, runtime.device, shuffle=train and cfg.shuffle)


@register("data", "toy", builder=build_toy_loader, reads=("image_files",), launchers=("single",))
@dataclass
class ToyLoaderConfig:
    name: str = "toy"
    shuffle: bool = True  # the training split in a fresh order each epoch
