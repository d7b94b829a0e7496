"""The ``task`` group: the objective. A task is a small object::

    class MSE:
        primary = "mse"            # the metric parity, the winner and HParams use
        higher_is_better = False
        def loss(self, output, target):     # scalar tensor: the batch's mean loss
            return torch.nn.functional.mse_loss(output.float(), target)
        def metrics(self, output, target):  # name -> tensor SUM over the batch, kept on the device
            return {"mse": ((output.float() - target) ** 2).sum()}

fastpipe sums ``metrics`` over the held-out split and all ranks and divides by the number of
held-out samples; an optional ``summarize(means) -> dict`` derives more (perplexity from loss).
An optional ``dataset_kinds`` (e.g. ``("tokens",)``) lets fastpipe refuse a dataset that declares
another kind before anything is built; an optional ``bounds = (low, high)`` (None: unbounded) is the
range the primary metric can take, so that a ``train.target`` outside it is refused; an optional
``soft_targets = True`` says the loss takes class probabilities (MixUp / CutMix).
"""
from __future__ import annotations

import math
from typing import Dict, Protocol

import torch
import torch.nn.functional as F

from fastpipe.config import TaskConfig
from fastpipe.errors import ConfigError


class Task(Protocol):
    """The objective: what the loop, evaluation and the reports ask of a task (the protocol above)."""

    primary: str
    higher_is_better: bool

    def loss(self, output, target) -> torch.Tensor: ...

    def metrics(self, output, target) -> Dict[str, torch.Tensor]: ...


class Classification:
    """Cross-entropy over class logits (N x C) and integer labels (N), or class probabilities (N x C,
    soft targets: MixUp / CutMix); held-out top-1 accuracy. ``label_smoothing``: the share of each
    training target spread evenly over the classes."""

    primary = "accuracy"
    higher_is_better = True
    bounds = (0.0, 1.0)  # what accuracy can be: a train.target outside is refused
    soft_targets = True  # the loss takes class probabilities (train.mixup_alpha / cutmix_alpha)

    def __init__(self, label_smoothing: float = 0.0) -> None:
        self.label_smoothing = label_smoothing

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output, target, label_smoothing=self.label_smoothing)

    def metrics(self, output: torch.Tensor, target: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"accuracy": (output.argmax(1) == target).sum(),
                "loss": F.cross_entropy(output.float(), target, reduction="sum")}


class LanguageModelling:
    """Next-token cross-entropy over logits (B x T x V) and targets (B x T, the input shifted by one).

    Held-out ``loss`` is in nats per token (the primary, lower is better), with ``perplexity``.
    """

    primary = "loss"
    higher_is_better = False
    bounds = (0.0, None)  # a cross-entropy is never negative
    dataset_kinds = ("tokens",)

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.flatten(0, -2), target.flatten())

    def metrics(self, output: torch.Tensor, target: torch.Tensor) -> Dict[str, torch.Tensor]:
        per_token = F.cross_entropy(output.float().flatten(0, -2), target.flatten(), reduction="none")
        return {"loss": per_token.view(target.shape).flatten(1).mean(1).sum()}  # each sequence's mean, summed

    def summarize(self, means: Dict[str, float]) -> Dict[str, float]:
        return {"perplexity": math.exp(min(means["loss"], 700.0))}

    @staticmethod
    def tokens(target: torch.Tensor) -> int:
        """Tokens a sample trains on (metrics.json's tokens_per_s)."""
        return int(target[0].numel())


REQUIRED = ("loss", "metrics", "primary", "higher_is_better")


def check_task(task, target: str) -> None:
    """Refuse an object that lacks the task protocol, naming what is missing."""
    missing = [name for name in REQUIRED if not hasattr(task, name)]
    if missing:
        raise ConfigError(f"task._target_={target!r} gives a {type(task).__name__} without {', '.join(missing)}; "
                          "a task has loss(output, target), metrics(output, target), primary and higher_is_better "
                          "(docs/project.md)")
    if not isinstance(task.higher_is_better, bool) or not isinstance(task.primary, str):
        raise ConfigError(f"task._target_={target!r}: primary must be a metric name (str) and higher_is_better "
                          "a bool")


def build_task(cfg: TaskConfig) -> Task:
    """The task ``cfg`` names, refused in one line when it lacks the protocol."""
    task = cfg.build()
    check_task(task, cfg.target)
    return task


def describe_task(task: Task) -> str:
    """graph.txt's task line."""
    return f"{type(task).__name__}  primary metric: {task.primary} ({'higher' if task.higher_is_better else 'lower'} " \
           "is better)"
