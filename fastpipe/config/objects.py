"""The groups a project supplies: ``dataset`` and ``model``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from fastpipe.config._checks import one_of
from fastpipe.errors import ConfigError


@dataclass
class DatasetConfig:
    name: str = MISSING
    root: Optional[str] = None  # imagefolder: the folder; shapes: where the generated copy lives
    image_size: int = 32
    augment: bool = False  # random-resized-crop + horizontal flip on the training split
    val_fraction: float = 0.2  # deterministic held-out split when the folder has no val/
    num_classes: int = 4  # shapes and synthetic only
    num_images: int = 2400  # shapes: images generated; synthetic: samples per epoch
    seed: int = 0  # shapes: the generator's seed (same settings -> byte-identical files)
    source_size: Optional[List[int]] = None  # shapes: [width, height] of the files; null = image_size

    def __post_init__(self) -> None:
        one_of("dataset.name", self.name, ("shapes", "imagefolder", "synthetic"))
        if self.image_size < 8:
            raise ConfigError(f"dataset.image_size={self.image_size} is too small; use >= 8")
        if not 0.0 < self.val_fraction < 1.0:
            raise ConfigError(f"dataset.val_fraction={self.val_fraction} must lie in (0, 1)")
        if self.source_size is not None and (len(self.source_size) != 2 or min(self.source_size) < 8):
            raise ConfigError(f"dataset.source_size={self.source_size}: use [width, height], each >= 8")
        if self.name == "imagefolder" and not self.root:
            raise ConfigError("dataset=imagefolder needs a folder: add dataset.root=/path/to/images "
                              "(one sub-folder per class)")


@dataclass
class ModelConfig:
    _target_: str = MISSING  # dotted path of an nn.Module class or factory
    kwargs: Dict[str, Any] = field(default_factory=dict)
    activation_checkpointing: bool = False
