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
range the primary metric can take, and each sample's share of its sum, so that a ``train.target``
outside it is refused and a target's screen ends once its outcome is settled as a miss; an optional
``soft_targets = True`` says the loss takes class probabilities (MixUp / CutMix). Optional ``check_batch(inputs, target)`` and
``check_output(output, target)`` say, for a first batch of each split (train/first_batch.py),
what the task cannot train on (a sentence naming it and the fix; None: fine), before the first step.
"""
from __future__ import annotations

import math
from typing import Dict, Optional

import torch
import torch.nn.functional as F

from fastpipe.config import TaskConfig
from fastpipe.errors import ConfigError
from fastpipe.protocols import Task


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

    def check_batch(self, inputs, target) -> Optional[str]:
        if not _is_int_tensor(target) or target.dim() != 1:
            return (f"its targets are {_shape(target)}, but the task takes integer class labels [N] "
                    "(a sample's target is an int); give labels, or choose a task for these targets")
        return None

    def check_output(self, output, target) -> Optional[str]:
        if not isinstance(output, torch.Tensor):
            return (f"the model returns {_shape(output)}, but the task takes one tensor of class logits "
                    "[N, C]; return the logits alone from forward() (or use a task whose loss takes that output)")
        if output.dim() != 2 or not output.is_floating_point() or output.shape[0] != target.shape[0]:
            return (f"the model returns {_shape(output)} for {target.shape[0]} samples, but the task takes "
                    f"class logits [N, C] (N={target.shape[0]}); return one row of logits per sample")
        top = int(target.max()) if target.numel() else -1
        if top >= output.shape[1] or (target.numel() and int(target.min()) < 0):
            return (f"the labels reach {top} (and must be >= 0), but the model gives {output.shape[1]} class logits; "
                    f"give the model num_classes={top + 1} or more (model.num_classes), or relabel the dataset 0..C-1")
        return None


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

    def check_batch(self, inputs, target) -> Optional[str]:
        if not _is_int_tensor(target) or target.dim() != 2:
            return (f"its targets are {_shape(target)}, but the task trains on token sequences: integer token ids "
                    "[B, T], the inputs shifted by one; choose a token dataset (e.g. dataset=tokens), or a task "
                    "for this data (e.g. task=classification)")
        return None

    def check_output(self, output, target) -> Optional[str]:
        if not isinstance(output, torch.Tensor) or output.dim() != 3 or tuple(output.shape[:2]) != tuple(target.shape):
            return (f"the model returns {_shape(output)} for targets {_shape(target)}, but the task takes next-token "
                    "logits [B, T, V]; return the logits alone from forward()")
        top = int(target.max()) if target.numel() else -1
        if top >= output.shape[-1]:
            return (f"the target token ids reach {top}, but the model gives logits over {output.shape[-1]} tokens; give the "
                    f"model a vocabulary of {top + 1} or more (model.vocab_size)")
        return None

    @staticmethod
    def tokens(target: torch.Tensor) -> int:
        """Tokens a sample trains on (metrics.json's tokens_per_s)."""
        return int(target[0].numel())


def _is_int_tensor(value) -> bool:
    return isinstance(value, torch.Tensor) and not value.is_floating_point() and not value.is_complex() \
        and value.dtype != torch.bool


def _shape(value) -> str:
    from fastpipe.data.splits import describe_value  # stages sit beside data: a leaf helper, no cycle

    return describe_value(value)


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
