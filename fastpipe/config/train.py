"""``train.*``: the training run's length, optimizer, schedule and checkpoints."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from fastpipe.config._checks import one_of
from fastpipe.errors import ConfigError


@dataclass
class TrainConfig:
    MOVED_KEYS: ClassVar[tuple] = ("lr", "optimizer", "momentum", "weight_decay")  # old spellings, not listed as keys

    epochs: int = 3
    max_steps: Optional[int] = None  # cap on optimizer steps over the whole run; null = epochs decide
    batch_size: int = 64  # per process
    lr: Optional[float] = None  # deprecated spelling of optimizer.lr (the peak learning rate)
    lr_schedule: str = "cosine"  # cosine (linear warm-up, then cosine decay to 0) | constant
    lr_warmup_steps: int = 0
    # Moved to the optimizer group (optimizer=adamw, optimizer.momentum, optimizer.weight_decay):
    # kept only to say so when an old command line sets them.
    optimizer: Optional[str] = None
    momentum: Optional[float] = None
    weight_decay: Optional[float] = None
    grad_accum: int = 1  # micro-batches per optimizer step
    max_nonfinite_steps: int = 20  # stop after this many non-finite losses in a row
    checkpoint_every: Optional[int] = 0  # steps between checkpoints in <run>/checkpoints; 0 or null = off
    keep_checkpoints: int = 3  # the newest K checkpoints are kept
    # auto = the newest good checkpoint of this run folder (fix hydra.run.dir); a step-*.pt file or
    # a run folder; null = start fresh.
    resume: Optional[str] = None

    def __post_init__(self) -> None:
        for key, new in (("optimizer", "optimizer={value} (with its lr: optimizer.lr=...)"),
                         ("momentum", "optimizer.momentum={value}"),
                         ("weight_decay", "optimizer.weight_decay={value}")):
            value = getattr(self, key)
            if value is not None:
                raise ConfigError(f"train.{key} moved to the optimizer group: use {new.format(value=value)} "
                                  f"instead of train.{key}={value}")
        one_of("train.lr_schedule", self.lr_schedule, ("cosine", "constant"))
        if self.lr_warmup_steps < 0:
            raise ConfigError(f"train.lr_warmup_steps={self.lr_warmup_steps} must be >= 0")
        for key in ("epochs", "batch_size", "grad_accum", "max_nonfinite_steps", "keep_checkpoints"):
            if getattr(self, key) < 1:
                raise ConfigError(f"train.{key}={getattr(self, key)} must be >= 1")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError("train.max_steps must be >= 1 (or null for no cap)")
        if self.checkpoint_every is not None and self.checkpoint_every < 0:
            raise ConfigError("train.checkpoint_every must be >= 0 (steps; 0 or null = off)")
        if self.resume in ("", "null", "none", "off", "false"):
            self.resume = None
