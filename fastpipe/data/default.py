"""data=default: torch.utils.data.DataLoader over the image files, decoded with PIL in workers."""
from __future__ import annotations

import multiprocessing

import torch
from torch.utils.data import DataLoader, Dataset, Subset
from torchvision import transforms
from torchvision.datasets.folder import default_loader

from fastpipe.config import DefaultLoaderConfig
from fastpipe.data.device import DeviceLoader, Normalizer
from fastpipe.data.sampler import ResumableSampler
from fastpipe.errors import DataError
from fastpipe.runtime import Runtime


class ImageFiles(Dataset):
    """(path, label) lists -> (uint8 CHW tensor, label)."""

    def __init__(self, files, labels, transform) -> None:
        self.files, self.labels, self.transform = files, labels, transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int):
        path = self.files[index]
        try:
            image = default_loader(path)
        except Exception as exc:  # name the file: "cannot identify image" alone is no help
            raise DataError(f"cannot read image {path}: {exc}; remove or replace the file") from exc
        return self.transform(image), self.labels[index]


def image_transform(image_size: int, augment: bool):
    """The host-side transform every file loader shares: resize (or random crop) to uint8."""
    if augment:
        geometry = [transforms.RandomResizedCrop(image_size, antialias=True), transforms.RandomHorizontalFlip()]
    else:
        geometry = [transforms.Resize((image_size, image_size), antialias=True)]
    return transforms.Compose(geometry + [transforms.PILToTensor()])


def build_default_loader(cfg: DefaultLoaderConfig, spec, runtime: Runtime, batch_size: int, seed: int,
                         train: bool, channels_last: bool) -> DeviceLoader:
    """The training (shuffled, augmented per dataset.augment) or held-out loader."""
    dist, device = runtime.dist, runtime.device
    files, labels = (spec.train_files, spec.train_labels) if train else (spec.val_files, spec.val_labels)
    dataset = ImageFiles(files, labels, image_transform(spec.image_size, spec.augment and train))
    sampler = None
    if train:  # order = f(seed, epoch) on every rank count, and resumable part-way (checkpoints)
        sampler = ResumableSampler(dataset, dist.world_size, dist.rank, seed=seed, drop_last=cfg.drop_last)
    elif dist.world_size > 1:
        dataset = Subset(dataset, range(dist.rank, len(dataset), dist.world_size))  # each sample once
    workers = cfg.workers(runtime.cores_per_process)
    pin = cfg.pin(device.type)
    generator = torch.Generator().manual_seed(seed)
    # The training process is itself spawned, so its default start method is spawn, which re-imports
    # torch in every worker (seconds per epoch start). Workers never touch CUDA: fork is safe.
    context = "fork" if workers > 0 and "fork" in multiprocessing.get_all_start_methods() else None
    loader = DataLoader(
        dataset, batch_size=batch_size, shuffle=train and sampler is None, sampler=sampler,
        num_workers=workers, pin_memory=pin, drop_last=cfg.drop_last and train, generator=generator,
        persistent_workers=cfg.persistent_workers and workers > 0,
        prefetch_factor=cfg.prefetch_factor if workers > 0 else None, multiprocessing_context=context)
    if train and len(loader) == 0:
        raise DataError(f"{len(dataset)} training images give no full batch of {batch_size}; lower "
                        "train.batch_size or set data.drop_last=false")
    description = (f"default  DataLoader  num_workers={workers}  pin_memory={pin}  "
                   f"persistent_workers={loader.persistent_workers}  prefetch_factor={cfg.prefetch_factor}  "
                   f"drop_last={loader.drop_last}")
    return DeviceLoader(loader, Normalizer(device, channels_last), sampler, description)

