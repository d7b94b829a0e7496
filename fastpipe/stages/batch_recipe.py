"""What happens to a training batch on the device after any loader: MixUp / CutMix and progressive resizing.

- ``train.mixup_alpha`` / ``train.cutmix_alpha``: torchvision.transforms.v2 ``MixUp`` / ``CutMix``
  (both set: ``RandomChoice`` of the two per batch, as torchvision's reference recipes do). The labels
  become soft (N x classes), so only a task that declares ``soft_targets = True`` (the built-in
  classification: its cross-entropy takes class probabilities) and image batches (N, C, H, W) qualify.
  The mixing weight and box are drawn on the host from torch's generator (seeded per rank, saved in
  checkpoints); the mixing itself is device work: no host synchronisation.
- ``data.resize_schedule``: ``[(fraction, size), ...]``: from step ``fraction x total_steps`` on, training
  images are resized to ``size`` (torchvision's antialiased bilinear resize, on the device); the
  held-out evaluation sees the dataset's own size, as fastpipe.evaluate and fastpipe.load do.
"""
from __future__ import annotations

import warnings
from typing import List, Optional, Tuple

import torch

from fastpipe.errors import ConfigError, FastpipeWarning


def resize_steps(schedule: List[Tuple[float, int]], total_steps: int) -> List[Tuple[int, int]]:
    """``(first step, size)`` for each pair: step counts from 0, ``fraction x total_steps`` rounded down."""
    return [(int(fraction * total_steps), int(size)) for fraction, size in schedule]


def size_at(steps: List[Tuple[int, int]], step: int) -> int:
    """The image size of training step ``step`` (0-based) under ``resize_steps``."""
    size = steps[0][1]
    for first, s in steps:
        if step >= first:
            size = s
    return size


def resize(images: torch.Tensor, size: int) -> torch.Tensor:
    """Square ``size`` x ``size`` images, antialiased bilinear (torchvision.transforms.v2.functional.resize)."""
    if images.shape[-2:] == (size, size):
        return images
    from torchvision.transforms.v2.functional import resize as tv_resize

    out = tv_resize(images, [size, size], antialias=True)
    return out.contiguous(memory_format=torch.channels_last) \
        if images.is_contiguous(memory_format=torch.channels_last) and not images.is_contiguous() else out


class BatchRecipe:
    """``train(inputs, targets, step)`` before each training step (held-out batches pass untouched)."""

    def __init__(self, mix=None, resize_at: Optional[List[Tuple[int, int]]] = None) -> None:
        self.mix, self.resize_at = mix, resize_at

    @property
    def active(self) -> bool:
        return self.mix is not None or self.resize_at is not None

    def _images(self, inputs, what: str) -> torch.Tensor:
        if not isinstance(inputs, torch.Tensor) or inputs.dim() != 4 or not inputs.is_floating_point():
            shape = tuple(inputs.shape) if isinstance(inputs, torch.Tensor) else type(inputs).__name__
            raise ConfigError(f"{what} works on batches of images (N, C, H, W floats), but this dataset's inputs are "
                              f"{shape}: drop it for this dataset")
        return inputs

    def train(self, inputs, targets, step: int):
        if self.resize_at is not None:
            inputs = resize(self._images(inputs, "data.resize_schedule"), size_at(self.resize_at, step))
        if self.mix is not None:
            inputs, targets = self.mix(self._images(inputs, "train.mixup_alpha / train.cutmix_alpha"), targets)
        return inputs, targets

    def describe(self) -> str:
        parts = []
        if self.mix is not None:
            parts.append(f"{type(self.mix).__name__}")
        if self.resize_at is not None:
            parts.append("resize " + " -> ".join(f"{s} from step {first}" for first, s in self.resize_at))
        return "  ".join(parts)


def build_mix(mixup_alpha: Optional[float], cutmix_alpha: Optional[float], num_classes: Optional[int]):
    """torchvision's MixUp, CutMix, or a random choice of the two per batch; None when both are off."""
    from torchvision.transforms import v2

    chosen = ([v2.MixUp(alpha=mixup_alpha, num_classes=num_classes)] if mixup_alpha else []) + \
             ([v2.CutMix(alpha=cutmix_alpha, num_classes=num_classes)] if cutmix_alpha else [])
    if not chosen:
        return None
    return chosen[0] if len(chosen) == 1 else v2.RandomChoice(chosen)


def build_batch_recipe(train_cfg, schedule: Optional[List[Tuple[float, int]]], task, task_name: str,
                       num_classes: Optional[int], total_steps: int, dataset_name: str = "",
                       images: Optional[bool] = None, image_size=None) -> Optional[BatchRecipe]:
    """The recipe for ``train.mixup_alpha`` / ``train.cutmix_alpha`` and ``data.resize_schedule``
    (already checked, as pairs); None when none is set. ``images``: whether the dataset gives image
    batches (None: it does not say; the first batch is checked). ``image_size``: the dataset's, at which
    the held-out split is evaluated (a schedule ending elsewhere is said in a warning)."""
    if images is False and (schedule or train_cfg.mixup_alpha or train_cfg.cutmix_alpha):
        key = "data.resize_schedule" if schedule else "train.mixup_alpha / train.cutmix_alpha"
        raise ConfigError(f"{key} works on batches of images, and dataset={dataset_name} gives other samples (e.g. "
                          f"tokens): drop it for this dataset")
    mix = None
    if train_cfg.mixup_alpha or train_cfg.cutmix_alpha:
        key = "train.mixup_alpha" if train_cfg.mixup_alpha else "train.cutmix_alpha"
        if not getattr(task, "soft_targets", False):
            raise ConfigError(f"{key} mixes labels into soft ones, which task={task_name} cannot take (its loss needs "
                              "hard targets; a task declares soft_targets = True when it can): drop "
                              f"{key}, or use task=classification")
        if not num_classes:
            raise ConfigError(f"{key} needs the number of classes, which this dataset does not give "
                              "(a num_classes attribute): drop it for this dataset")
        mix = build_mix(train_cfg.mixup_alpha, train_cfg.cutmix_alpha, int(num_classes))
    resize_at = resize_steps(schedule, total_steps) if schedule else None
    if schedule and isinstance(image_size, int) and schedule[-1][1] != image_size:
        warnings.warn(f"data.resize_schedule ends at {schedule[-1][1]} px and the dataset's images are {image_size} px: "
                      f"held-out evaluations (metrics.json, train.target, best.pt) run at the dataset's {image_size} px, "
                      "as python -m fastpipe.evaluate and fastpipe.load do; end the schedule at "
                      f"{image_size} to evaluate the size it trains last", FastpipeWarning)
    recipe = BatchRecipe(mix, resize_at)
    return recipe if recipe.active else None
