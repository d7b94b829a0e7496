"""The ``data`` group: how batches reach the device. One schema per loader; ``auto`` values resolve here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Union

from fastpipe.config._checks import auto_or_bool, auto_or_int, one_of
from fastpipe.config.registry import Requirement, register
from fastpipe.errors import ConfigError


def check_share(key: str, value) -> None:
    """A fraction in [0, 1] (data.hw_decoder_load)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ConfigError(f"{key}={value!r} must lie in [0, 1]")


def _pin(setting, device_type: str) -> bool:
    return device_type == "cuda" if setting == "auto" else bool(setting)


MAX_RESIZE_SIZES = 4  # each size is one more compiled graph (compile.dynamic=false)
TRAINING_CORES = 4  # physical cores a training process keeps beside data.decode_workers (data.decode_affinity)
MAX_DECODE_WORKERS = 16  # data.decode_workers=auto: 12 fed ResNet-50 on an H200 at twice its rate


def decode_workers_bound(cores: int) -> int:
    """The most decoding processes a process of ``cores`` cores may start: its cores less those the training
    keeps (TRAINING_CORES, at most half of them), and at least 2, so that the worker pool runs anywhere. More
    processes than cores only compete for them (1,000 on 2 cores forked 581 processes in a minute)."""
    return max(2, cores - min(TRAINING_CORES, cores // 2))


def resize_schedule(value) -> Optional[List[tuple]]:
    """``data.resize_schedule`` as ``[(fraction, size), ...]``, checked; None when unset."""
    if value is None:
        return None
    example = "e.g. data.resize_schedule='[[0,24],[0.6,32]]'"
    try:
        pairs = [(float(f), s) for f, s in value]
    except (TypeError, ValueError):
        raise ConfigError(f"data.resize_schedule={value!r}: give a list of [fraction_of_run, image_size] pairs, "
                          f"{example}") from None
    fractions = [f for f, _ in pairs]
    if not pairs or fractions[0] != 0.0 or any(b <= a for a, b in zip(fractions, fractions[1:])) \
            or fractions[-1] >= 1.0:
        raise ConfigError(f"data.resize_schedule={value!r}: the fractions must start at 0 and rise below 1 "
                          f"(where in the run each size starts), {example}")
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 8 for _, s in pairs):
        raise ConfigError(f"data.resize_schedule={value!r}: each image_size must be an integer >= 8, {example}")
    if len({s for _, s in pairs}) > MAX_RESIZE_SIZES:
        raise ConfigError(f"data.resize_schedule={value!r} has more than {MAX_RESIZE_SIZES} sizes: each is "
                          "compiled apart (and cuDNN tunes each), so keep to a few")
    return pairs


@dataclass
class LoaderCommon:
    """What every loader takes: how batches are shaped on the device after it."""

    # Progressive resizing: [[fraction_of_run, image_size], ...], from fraction f of the run's steps on,
    # training images are resized on the device to that size (antialiased bilinear); the held-out
    # evaluation runs at the last size. Image datasets only; null = the dataset's own size throughout.
    resize_schedule: Optional[List[Any]] = None

    def __post_init__(self) -> None:
        resize_schedule(self.resize_schedule)


@register("data", "default", builder="fastpipe.data.default:build_default_loader",
          reads=("image_files", "tokens", "generated", "samples"), uses_collate_fn=True, held_out_subset=True,
          streams=True)
@dataclass
class DefaultLoaderConfig(LoaderCommon):
    """data=default: torch.utils.data.DataLoader with the seeds' knobs."""

    name: str = "default"  # the choice: data=default
    # Worker processes. auto = 0 when this process reads a sample in under 50 us (timed on the split's first
    # 256, at most ~13 ms: rows of in-memory tensors, windows of a memory map), where workers cost more than
    # they bring (their start, every batch passed between processes, cores taken from the step); else
    # min(16, this process's share of the CPU cores) (image files, samples a dataset computes).
    num_workers: Any = "auto"
    pin_memory: Any = "auto"  # page-locked batches for non-blocking copies; auto = on when training on CUDA
    persistent_workers: bool = True  # keep workers alive between epochs
    prefetch_factor: int = 2  # batches each worker keeps ready
    drop_last: bool = True  # training: drop the short last batch (constant shape for compile / CUDA graphs)

    def __post_init__(self) -> None:
        super().__post_init__()
        auto_or_int("data.num_workers", self.num_workers)
        auto_or_bool("data.pin_memory", self.pin_memory)
        if self.prefetch_factor < 1:
            raise ConfigError("data.prefetch_factor must be >= 1")

    def workers(self, cores: int, cheap_samples: bool = False) -> int:
        """Worker processes, given this process's share of the CPU cores and whether the split's samples
        read faster than workers pay (``cheap_samples``: data/default.py times them, for auto only)."""
        if self.num_workers != "auto":
            return int(self.num_workers)
        return 0 if cheap_samples else max(1, min(16, cores))

    def pin(self, device_type: str) -> bool:
        return _pin(self.pin_memory, device_type)


@register("data", "mmap", builder="fastpipe.data.mmap:build_mmap_loader", reads=("image_files", "tokens", "samples"),
          held_out_subset=True, relieves=("data",))
@dataclass
class MmapLoaderConfig(LoaderCommon):
    """data=mmap: batches gathered out of a memory-mapped pack (docs/data.md)."""

    name: str = "mmap"  # the choice: data=mmap
    path: Optional[str] = None  # a pack file, or a sharded pack (its folder or index.json); null = the cache
    # Image size stored in the cache: N or [height, width]; null = image_size (8/7 of it with augment).
    stored_size: Any = None
    num_threads: Any = "auto"  # threads copying batches out of the map; auto = min(4, this process's cores)
    prefetch: int = 4  # batches read ahead of the training step
    pin_memory: Any = "auto"  # auto = on when training on CUDA (non-blocking host-to-device copies)
    drop_last: bool = True  # training: drop the short last batch (constant shape for compile / CUDA graphs)
    verify: bool = True  # check every chunk checksum of the pack (a sharded pack: this rank's shards) at open
    pack_threads: Any = "auto"  # processes packing the cache, threads verifying it; auto = this process's cores
    # How the cached pack stores images: null or raw = uint8 pixels; jpeg = JPEG files at data.quality
    # (about 1/10 of the bytes, decoded per batch). A data.path pack is read as it was written.
    codec: Optional[str] = None
    quality: int = 90  # data.codec=jpeg: JPEG quality of the cached pack (1-100); for any other pack a warning says it does nothing
    # JPEG packs: gpu (torchvision's batched nvJPEG) | cpu (threads) | dali (one NVIDIA DALI pipeline: the GPU's
    # hardware JPEG decoder on CUDA, its CPU decoder otherwise, data.prefetch batches ahead; needs fastpipe[dali]);
    # auto = cpu (worker processes) when training on CUDA with data.decode_workers at 2 or more, gpu (nvJPEG)
    # with fewer, cpu when training on the CPU. Raw packs have nothing to decode: the key changes nothing there.
    decoder: str = "auto"
    # data.decoder=dali, or cpu with data.decode_workers=0: threads decoding (DALI's); auto = this process's cores
    decode_threads: Any = "auto"
    # data.decoder=cpu: worker processes decoding whole batches (no interpreter lock shared with the training
    # loop); 0 = data.decode_threads threads inside the training process; auto = 0 when training on the CPU
    # (the step needs the cores) or with fewer than 6 cores a process, else its cores - 4 (at most 16).
    decode_workers: Any = "auto"
    # data.decode_workers: run the workers beside each local rank's first 4 physical cores (SMT siblings
    # included), not on them, each rank's workers on CPUs of their own; false = where the OS puts them.
    decode_affinity: bool = True
    # data.decoder=dali on CUDA: share of the JPEGs given to the hardware JPEG decoder (the rest: nvJPEG on the
    # SMs with CPU Huffman decoding, which compete with the training step); 1.0 = all of them.
    hw_decoder_load: float = 1.0
    # Sharded packs: samples held back to shuffle a sequential read (over all ranks; fewer than 2 a lane is
    # refused); 0 = every epoch a fresh permutation of each rank's samples; auto = 0 when this rank's shards
    # fit in half the RAM, else 16384.
    shuffle_buffer: Any = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        size = self.stored_size
        sizes = [size] if isinstance(size, int) else list(size) if isinstance(size, (list, tuple)) else None
        if size is not None and (not sizes or len(sizes) > 2 or any(isinstance(s, bool) or not isinstance(s, int)
                                                                   or s < 8 for s in sizes)):
            raise ConfigError(f"data.stored_size={size!r}: use null (auto), N or [height, width], each >= 8")
        auto_or_int("data.num_threads", self.num_threads, minimum=1)
        auto_or_int("data.pack_threads", self.pack_threads, minimum=1)
        auto_or_bool("data.pin_memory", self.pin_memory)
        if self.prefetch < 1:
            raise ConfigError("data.prefetch must be >= 1")
        if self.codec is not None:
            one_of("data.codec", self.codec, ("raw", "jpeg"))
        if isinstance(self.quality, bool) or not isinstance(self.quality, int) or not 1 <= self.quality <= 100:
            raise ConfigError(f"data.quality={self.quality!r} must be an integer in 1..100")
        one_of("data.decoder", self.decoder, ("auto", "gpu", "cpu", "dali"))
        auto_or_int("data.decode_threads", self.decode_threads, minimum=1)
        auto_or_int("data.decode_workers", self.decode_workers, minimum=0)
        check_share("data.hw_decoder_load", self.hw_decoder_load)
        auto_or_int("data.shuffle_buffer", self.shuffle_buffer, minimum=0)

    def decoder_for(self, device_type: str, cores: int) -> str:
        """``auto`` = ``cpu`` on a CPU run, and on CUDA when ``cores`` (a process's) give it 2 or more worker
        processes (they trained as fast as the raw pack, nvJPEG at 0.93x: docs/data.md), else ``gpu``
        (nvJPEG); ``dali`` runs on either."""
        if self.decoder == "auto":
            return "cpu" if device_type != "cuda" or self.decoding_workers(device_type, cores) >= 2 else "gpu"
        if self.decoder == "gpu" and device_type != "cuda":
            raise ConfigError(f"data.decoder=gpu decodes JPEGs on the GPU, but training runs on {device_type}; "
                              "use data.decoder=auto or data.decoder=cpu")
        return self.decoder

    def decoding_threads(self, cores: int) -> int:
        return max(1, cores) if self.decode_threads == "auto" else int(self.decode_threads)

    def decoding_workers(self, device_type: str, cores: int) -> int:
        """The worker processes that decode, for a process of ``cores`` cores; an explicit count above what the
        machine can run beside the training (``decode_workers_bound``) is refused in one line."""
        if self.decode_workers != "auto":
            bound = decode_workers_bound(cores)
            if int(self.decode_workers) > bound:
                raise ConfigError(f"data.decode_workers={self.decode_workers} is more decoding processes than this "
                                  f"process's {cores} cores can run beside its training (at most {bound}); use "
                                  f"data.decode_workers=auto, or a number up to {bound}")
            return int(self.decode_workers)
        return 0 if device_type == "cpu" or cores < TRAINING_CORES + 2 else min(MAX_DECODE_WORKERS, cores - TRAINING_CORES)

    def reader_threads(self, cores: int) -> int:
        return max(1, min(4, cores)) if self.num_threads == "auto" else int(self.num_threads)

    def packing_threads(self, cores: int) -> int:
        return max(1, cores) if self.pack_threads == "auto" else int(self.pack_threads)

    def pin(self, device_type: str) -> bool:
        return _pin(self.pin_memory, device_type)


@register("data", "dali", builder="fastpipe.data.dali:build_dali_loader", reads=("image_files",),
          held_out_subset=True, overfit_batches=False, relieves=("data",),  # DALI's reader takes whole image folders
          requires=Requirement("nvidia.dali", "fastpipe[dali]", "NVIDIA DALI", "data=default"))
@dataclass
class DaliLoaderConfig(LoaderCommon):
    """data=dali: NVIDIA DALI pipelines (needs the extra: pip install "fastpipe[dali]")."""

    name: str = "dali"  # the choice: data=dali
    decoder: str = "auto"  # auto = mixed (nvJPEG + the hardware decoder) when training on CUDA, else cpu
    num_threads: Any = "auto"  # DALI CPU threads per process; auto = this process's share of the cores
    prefetch_queue_depth: int = 2  # batches DALI prepares ahead
    hw_decoder_load: float = 0.65  # mixed only: share of JPEGs given to the hardware JPEG decoder
    jpeg_fancy_upsampling: bool = True  # mixed, whole-image decodes: chroma upsampling as libjpeg / PIL do
    # DALI's dynamic executor hands each batch to torch zero-copy through DLPack; false runs the
    # classic executor, whose iterator copies batches into torch-owned tensors.
    exec_dynamic: bool = True
    drop_last: bool = True  # training: drop the short last batch (constant shape for compile / CUDA graphs)

    def __post_init__(self) -> None:
        super().__post_init__()
        one_of("data.decoder", self.decoder, ("auto", "cpu", "mixed"))
        auto_or_int("data.num_threads", self.num_threads, minimum=1)
        if self.prefetch_queue_depth < 1:
            raise ConfigError("data.prefetch_queue_depth must be >= 1")
        check_share("data.hw_decoder_load", self.hw_decoder_load)

    def threads(self, cores: int) -> int:
        return max(1, cores) if self.num_threads == "auto" else int(self.num_threads)

    def decoder_for(self, device_type: str) -> str:
        """``auto`` = ``mixed`` (GPU decode) when training on CUDA, ``cpu`` otherwise."""
        if self.decoder == "auto":
            return "mixed" if device_type == "cuda" else "cpu"
        if self.decoder == "mixed" and device_type != "cuda":
            raise ConfigError(f"data.decoder=mixed decodes on the GPU, but training runs on {device_type}; "
                              "use data.decoder=auto or data.decoder=cpu")
        return self.decoder


LoaderConfig = Union[DefaultLoaderConfig, MmapLoaderConfig, DaliLoaderConfig]
