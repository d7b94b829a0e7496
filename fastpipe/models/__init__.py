"""Models: the built-in TinyCNN and GPT, ``build_model`` for any ``model._target_``, activation checkpointing."""
from __future__ import annotations

import contextlib
from typing import List, Optional

import torch
from torch import nn

from fastpipe.config import ModelConfig
from fastpipe.errors import ConfigError
from fastpipe.models.gpt import GPT


class TinyCNN(nn.Module):
    """Three conv blocks and a linear head: learns the built-in shapes dataset on a CPU in seconds."""

    def __init__(self, num_classes: int = 10, width: int = 32) -> None:
        super().__init__()

        def block(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                                 nn.BatchNorm2d(cout), nn.ReLU(inplace=True), nn.MaxPool2d(2))

        self.features = nn.Sequential(block(3, width), block(width, 2 * width), block(2 * width, 4 * width))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def build_model(cfg: ModelConfig, dataset_facts: dict, choice: str = "", device=None) -> nn.Module:
    """Instantiate ``model._target_`` with its keys; ``dataset_facts`` (num_classes, vocab_size,
    seq_len) are passed when the callable takes them and the config does not set them.

    ``device``: construct it there (torch's device context: every parameter and buffer is created, and
    initialised by the module's own code, on that device: no host copy to move; ``"meta"``: nothing
    allocated). On a GPU the initial values come from the GPU's seeded generator, so they differ from a
    host build's with the same seed, and are the same from run to run on that device."""
    from fastpipe.instantiate import parameters

    takes = parameters(cfg.callable()) or {}
    for key in ("vocab_size", "num_classes", "seq_len"):
        p = takes.get(key)
        if p is not None and p.default is p.empty and cfg.params.get(key) is None and key not in dataset_facts:
            raise ConfigError(f"model={choice or cfg.short_name} needs {key}, which the dataset does not give; "
                              f"choose a dataset that has it (e.g. dataset=tokens), or set model.{key}=N")
    with contextlib.nullcontext() if device is None else torch.device(device):
        model = cfg.build(**dataset_facts)
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model._target_={cfg.target!r} returned {type(model).__name__}, not an nn.Module")
    return model


def describe_model(cfg: ModelConfig, model: nn.Module) -> str:
    """graph.txt's model line: the callable, its size, and activation checkpointing when on."""
    params = sum(p.numel() for p in model.parameters())
    return f"{cfg.target}  params={params / 1e6:.2f}M" + ("  activation_checkpointing" if cfg.activation_checkpointing
                                                          else "")


def is_conv_net(model: nn.Module) -> bool:
    """True when the model has 2-D convolutions (channels_last pays off for those)."""
    return any(isinstance(m, nn.Conv2d) for m in model.modules())


def repeated_blocks(model: nn.Module) -> List[nn.Module]:
    """The model's blocks: the modules of every ``nn.ModuleList`` (a transformer's layers) and the
    multi-layer children of its top-level ``nn.Sequential`` stages (ResNet layers, TinyCNN blocks)."""
    blocks = [m for container in model.modules() if isinstance(container, nn.ModuleList) for m in container]
    if blocks:
        return blocks
    return [child for stage in model.children() if isinstance(stage, nn.Sequential)
            for child in stage.children() if len(list(child.children())) > 1]


def enable_activation_checkpointing(model: nn.Module, blocks: Optional[List[nn.Module]] = None) -> int:
    """Recompute each block's activations in backward instead of storing them: every one of ``blocks``
    (default ``repeated_blocks(model)``) is replaced by torch's ``checkpoint_wrapper`` of itself, whose
    state-dict hooks keep the parameter names unchanged (checkpoints load with or without it).
    Returns how many were wrapped."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

    targets = {id(b) for b in (repeated_blocks(model) if blocks is None else blocks)}
    wrapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if id(child) in targets:  # a ModuleList's entries are named "0", "1", ...
                setattr(parent, name, checkpoint_wrapper(child, checkpoint_impl=CheckpointImpl.NO_REENTRANT))
                wrapped += 1
    if not wrapped:
        raise ConfigError(f"model.activation_checkpointing=true found no blocks to checkpoint in "
                          f"{type(model).__name__}: it wraps the modules of nn.ModuleList containers, or the "
                          "blocks of top-level nn.Sequential stages (with launcher=fsdp, the launcher.shard units)")
    return wrapped


__all__ = ["GPT", "TinyCNN", "build_model", "enable_activation_checkpointing", "is_conv_net", "repeated_blocks"]
