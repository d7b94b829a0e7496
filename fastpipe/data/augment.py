"""Image augmentation on the training device, for batches of uint8 images (data=mmap).

Random-resized-crop + flip (torchvision's RandomResizedCrop parameters, drawn for a whole batch at
once and applied through ``torchvision.ops.roi_align``) or a plain resize, then the ImageNet
normalisation; on CUDA all of it runs on the GPU.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from fastpipe.data.device import Normalizer


def random_resized_boxes(n: int, height: int, width: int, generator: torch.Generator, device,
                         scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), attempts: int = 10) -> torch.Tensor:
    """torchvision's ``RandomResizedCrop.get_params`` for ``n`` images at once: (n, 4) x1, y1, x2, y2."""
    area = torch.empty(n, attempts, device=device).uniform_(*scale, generator=generator) * (height * width)
    log_ratio = torch.empty(n, attempts, device=device).uniform_(math.log(ratio[0]), math.log(ratio[1]),
                                                                  generator=generator)
    w, h = (area * log_ratio.exp()).sqrt().round(), (area / log_ratio.exp()).sqrt().round()
    fits = (w >= 1) & (w <= width) & (h >= 1) & (h <= height)
    tries = torch.arange(attempts, device=device).expand(n, attempts)
    first = torch.where(fits, tries, attempts - 1).amin(1, keepdim=True)  # torchvision takes the first fit
    w, h, ok = w.gather(1, first).squeeze(1), h.gather(1, first).squeeze(1), fits.any(1)
    # No attempt fits: torchvision's fall-back, the whole image clamped to the ratio range, centred.
    in_ratio = width / height
    fw, fh = ((width, round(width / ratio[0])) if in_ratio < ratio[0] else
              (round(height * ratio[1]), height) if in_ratio > ratio[1] else (width, height))
    w, h = torch.where(ok, w, float(fw)), torch.where(ok, h, float(fh))
    u = torch.rand(n, 2, device=device, generator=generator)
    x1 = torch.where(ok, (u[:, 0] * (width - w + 1)).floor(), ((width - w) / 2).floor())
    y1 = torch.where(ok, (u[:, 1] * (height - h + 1)).floor(), ((height - h) / 2).floor())
    return torch.stack([x1, y1, x1 + w, y1 + h], 1)


class DeviceTransform:
    """uint8 N x C x H x W on the host -> on ``device``: crop/flip or resize to ``size``, normalise."""

    def __init__(self, device: torch.device, size: int, augment: bool, channels_last: bool, seed: int) -> None:
        self.device, self.size, self.augment, self.seed = device, size, augment, seed
        self.norm = Normalizer(device, channels_last)
        self.generator = torch.Generator(device=device)
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        """Crops depend on (seed, epoch) only, so a resumed epoch gets the same ones."""
        self.generator.manual_seed((self.seed * 1_000_003 + epoch) % 2**63)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if not self.augment and tuple(images.shape[-2:]) == (self.size, self.size):
            return self.norm(images)  # stored at the training size: exactly data=default's path
        x = images.to(self.device, non_blocking=True).float()
        n, _, height, width = x.shape
        if self.augment:
            from torchvision.ops import roi_align  # imported on use: torchvision's import pulls in torch._dynamo

            boxes = random_resized_boxes(n, height, width, self.generator, x.device)
            rois = torch.cat([torch.arange(n, device=x.device, dtype=x.dtype)[:, None], boxes], 1)
            # aligned=True: box edges are pixel edges; sampling_ratio=-1 averages ceil(crop/size)
            # samples per output pixel, so large crops are downscaled without aliasing.
            x = roi_align(x, rois, (self.size, self.size), spatial_scale=1.0, sampling_ratio=-1, aligned=True)
            flip = torch.rand(n, device=x.device, generator=self.generator) < 0.5
            x = torch.where(flip.view(n, 1, 1, 1), x.flip(3), x)
        else:
            x = F.interpolate(x, size=(self.size, self.size), mode="bilinear", antialias=True, align_corners=False)
        return x.sub_(self.norm.mean).div_(self.norm.std).contiguous(memory_format=self.norm.memory_format)


class ImagePackPrep:
    """(uint8 images, labels) on the host -> (augmented, normalised images, labels) on the device."""

    def __init__(self, transform: DeviceTransform) -> None:
        self.transform, self.device = transform, transform.device

    def set_epoch(self, epoch: int) -> None:
        self.transform.set_epoch(epoch)

    def __call__(self, batch):
        images, labels = batch
        return self.transform(images), labels.to(self.device, non_blocking=True)
