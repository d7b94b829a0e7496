"""Models: the built-in TinyCNN, and ``build_model`` for any nn.Module named by a dotted path."""
from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

import torch
from torch import nn

from fastpipe.errors import ConfigError


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


def import_target(target: str):
    """Import ``pkg.module.Name``; the working folder is importable, as a user expects."""
    module_name, _, attr = target.rpartition(".")
    if not module_name:
        raise ConfigError(f"model._target_={target!r} is not a dotted path; use e.g. mypkg.models.Net")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.append(cwd)
    try:
        module = importlib.import_module(module_name)
        return getattr(module, attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"model._target_={target!r} cannot be imported ({exc}); check the name, and "
                          "that its module is on PYTHONPATH or in the working folder") from exc


def build_model(target: str, kwargs: dict, num_classes: int) -> nn.Module:
    """Instantiate the model; ``num_classes`` is passed when the callable accepts it."""
    factory = import_target(target)
    kwargs = dict(kwargs)
    try:
        params = inspect.signature(factory).parameters
        accepts = "num_classes" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    except (TypeError, ValueError):
        accepts = False
    if accepts:
        kwargs.setdefault("num_classes", num_classes)
    model = factory(**kwargs)
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model._target_={target!r} returned {type(model).__name__}, not an nn.Module")
    return model


def is_conv_net(model: nn.Module) -> bool:
    """True when the model has 2-D convolutions (channels_last pays off for those)."""
    return any(isinstance(m, nn.Conv2d) for m in model.modules())


def enable_activation_checkpointing(model: nn.Module) -> int:
    """Recompute each top-level child's activations in backward instead of storing them.

    Wraps the children of the model's sequential stages (ResNet layers, TinyCNN blocks) with
    torch.utils.checkpoint; returns how many modules were wrapped.
    """
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return checkpoint(self.inner, x, use_reentrant=False) if self.training else self.inner(x)

    wrapped = 0
    for stage in list(model.children()):
        if not isinstance(stage, nn.Sequential):
            continue
        for name, child in list(stage.named_children()):
            if len(list(child.children())) > 1:  # a block (conv+bn+relu...), not a lone layer
                setattr(stage, name, Checkpointed(child))
                wrapped += 1
    if not wrapped:
        raise ConfigError(f"model.activation_checkpointing=true found no blocks to checkpoint in "
                          f"{type(model).__name__}: it wraps the blocks of top-level nn.Sequential stages")
    return wrapped
