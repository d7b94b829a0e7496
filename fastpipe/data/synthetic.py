"""``dataset=synthetic``: random batches generated on the training device, to measure the model alone.

Images (``num_classes`` classes at ``image_size``) for classification, or, with ``vocab_size`` set,
token sequences of ``seq_len`` for ``task=lm``. Nothing to learn: held-out metrics are null.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from fastpipe.errors import ConfigError


@dataclass
class SyntheticData:
    """The settings of the synthetic batches; ``SyntheticLoader`` makes them on the device."""

    num_samples: int  # per epoch
    num_classes: Optional[int]  # images (None for tokens)
    image_size: Optional[int]
    vocab_size: Optional[int] = None  # set: token sequences (a model takes it from here, as it does num_classes)
    seq_len: Optional[int] = None

    @property
    def tokens(self) -> bool:
        return self.vocab_size is not None

    def describe(self) -> str:
        what = (f"token sequences: vocab_size={self.vocab_size}  seq_len={self.seq_len}" if self.tokens else
                f"images: classes={self.num_classes}  image_size={self.image_size}")
        return f"samples/epoch={self.num_samples}  random {what}  (generated on the device)"


def synthetic(num_classes: int = 1000, image_size: int = 224, num_images: int = 25600,
              vocab_size: Optional[int] = None, seq_len: int = 1024) -> SyntheticData:
    """Device-resident random data: ``num_images`` samples per epoch; tokens when ``vocab_size`` is set."""
    if vocab_size is not None and vocab_size < 2:
        raise ConfigError(f"dataset.vocab_size={vocab_size} must be >= 2 (or null for images)")
    if vocab_size is None:
        return SyntheticData(num_images, num_classes, image_size)
    return SyntheticData(num_images, None, None, vocab_size, seq_len)


def _kind(params: dict) -> str:
    return "tokens" if params.get("vocab_size") is not None else "images"


synthetic.sample_kind = _kind
synthetic.data_format = "generated"  # which loaders read it: config/registry.py


class SyntheticLoader:
    """Yields a few fixed random batches (already on the device) round-robin, ``steps`` per epoch."""

    DISTINCT = 4  # a handful of distinct batches: no cache effects from one repeated tensor

    def __init__(self, data: SyntheticData, device: torch.device, batch_size: int, seed: int,
                 channels_last: bool) -> None:
        # drawn on the device itself: a CPU draw of a large batch (2 GB of images at 4,096 x 224 px) takes
        # seconds, paid again by every probe of train.batch_size=auto
        g = torch.Generator(device=device if device.type == "cuda" else "cpu").manual_seed(seed)
        self.batches = [self._batch(data, batch_size, g, device, channels_last) for _ in range(self.DISTINCT)]
        self.steps = max(1, data.num_samples // batch_size)

    @staticmethod
    def _batch(data: SyntheticData, batch_size: int, g: torch.Generator, device, channels_last: bool):
        on = g.device  # where ``g`` draws: the training device, or the CPU
        if data.tokens:  # a target that is the input shifted by one, as in language modelling
            seq = torch.randint(0, data.vocab_size, (batch_size, data.seq_len + 1), generator=g, device=on).to(device)
            return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        shape = (batch_size, 3, data.image_size, data.image_size)
        return (torch.randn(shape, generator=g, device=on).to(device).contiguous(memory_format=fmt),
                torch.randint(0, data.num_classes, (batch_size,), generator=g, device=on).to(device))

    def __len__(self) -> int:
        return self.steps

    def describe(self) -> str:
        return f"synthetic  {self.DISTINCT} device-resident random batches (no input pipeline)"

    def set_epoch(self, epoch: int) -> None:
        pass  # fixed batches: nothing to reshuffle

    def __iter__(self):
        for i in range(self.steps):
            yield self.batches[i % self.DISTINCT]
