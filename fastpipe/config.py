"""Structured-config schemas: one dataclass per group choice, registered with Hydra's ConfigStore.

Each YAML file under conf/<group>/ starts from its schema (``defaults: [schema_<name>]``) so that a
wrong type or an unknown key fails with OmegaConf's own message. ``to_settings`` converts the
composed DictConfig to these dataclasses once, at the edge; nothing past it sees Hydra.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from fastpipe.errors import ConfigError


def _one_of(key: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not valid; use one of {', '.join(map(str, allowed))}")


def _auto_or_int(key: str, value: Any, minimum: int = 0) -> None:
    if value == "auto":
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}={value!r} is not valid; use 'auto' or an integer >= {minimum}")


# ---------------------------------------------------------------- dataset
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
        _one_of("dataset.name", self.name, ("shapes", "imagefolder", "synthetic"))
        if self.image_size < 8:
            raise ConfigError(f"dataset.image_size={self.image_size} is too small; use >= 8")
        if not 0.0 < self.val_fraction < 1.0:
            raise ConfigError(f"dataset.val_fraction={self.val_fraction} must lie in (0, 1)")
        if self.source_size is not None and (len(self.source_size) != 2 or min(self.source_size) < 8):
            raise ConfigError(f"dataset.source_size={self.source_size}: use [width, height], each >= 8")
        if self.name == "imagefolder" and not self.root:
            raise ConfigError("dataset=imagefolder needs a folder: add dataset.root=/path/to/images "
                              "(one sub-folder per class)")


# ---------------------------------------------------------------- model
@dataclass
class ModelConfig:
    _target_: str = MISSING  # dotted path of an nn.Module class or factory
    kwargs: Dict[str, Any] = field(default_factory=dict)
    activation_checkpointing: bool = False


# ---------------------------------------------------------------- data (loaders)
@dataclass
class DefaultLoaderConfig:
    name: str = "default"
    num_workers: Any = "auto"  # auto = min(16, CPU cores per process)
    pin_memory: Any = "auto"  # auto = on when training on CUDA
    persistent_workers: bool = True
    prefetch_factor: int = 2
    drop_last: bool = True

    def __post_init__(self) -> None:
        _auto_or_int("data.num_workers", self.num_workers)
        if self.pin_memory != "auto" and not isinstance(self.pin_memory, bool):
            raise ConfigError(f"data.pin_memory={self.pin_memory!r}: use auto, true or false")
        if self.prefetch_factor < 1:
            raise ConfigError("data.prefetch_factor must be >= 1")


@dataclass
class DaliLoaderConfig:
    name: str = "dali"
    decoder: str = "auto"  # auto = mixed (GPU decode) when training on CUDA, else cpu
    num_threads: Any = "auto"  # DALI CPU threads per process; auto = this process's share of cores
    prefetch_queue_depth: int = 2  # batches DALI prepares ahead
    hw_decoder_load: float = 0.65  # mixed only: share of JPEGs sent to the hardware JPEG decoder
    jpeg_fancy_upsampling: bool = True  # mixed, whole-image decodes: chroma upsampling as libjpeg/PIL do
    # DALI's dynamic executor (its default) hands each batch to torch zero-copy through DLPack;
    # false runs the classic executor, whose iterator copies batches into torch-owned tensors.
    exec_dynamic: bool = True
    drop_last: bool = True  # training: constant batch shape

    def __post_init__(self) -> None:
        _one_of("data.decoder", self.decoder, ("auto", "cpu", "mixed"))
        _auto_or_int("data.num_threads", self.num_threads, minimum=1)
        if self.prefetch_queue_depth < 1:
            raise ConfigError("data.prefetch_queue_depth must be >= 1")
        if not 0.0 <= self.hw_decoder_load <= 1.0:
            raise ConfigError(f"data.hw_decoder_load={self.hw_decoder_load} must lie in [0, 1]")


@dataclass
class MmapLoaderConfig:
    name: str = "mmap"
    path: Optional[str] = None  # a pack to read; null = pack the dataset once into the cache
    stored_size: Any = None  # int or [height, width] to store; null = auto (image_size, 8/7 of it with augment)
    num_threads: Any = "auto"  # reader threads copying batches out of the map; auto = min(4, cores/process)
    prefetch: int = 4  # batches read ahead of the training step
    pin_memory: Any = "auto"  # auto = on when training on CUDA
    drop_last: bool = True  # training: constant batch shape
    verify: bool = True  # check every chunk checksum when the pack is opened
    pack_threads: Any = "auto"  # threads packing the cache and verifying checksums; auto = cores/process

    def __post_init__(self) -> None:
        size = self.stored_size
        sizes = [size] if isinstance(size, int) else list(size) if isinstance(size, (list, tuple)) else None
        if size is not None and (not sizes or len(sizes) > 2 or any(isinstance(s, bool) or not isinstance(s, int)
                                                                   or s < 8 for s in sizes)):
            raise ConfigError(f"data.stored_size={size!r}: use null (auto), N or [height, width], each >= 8")
        _auto_or_int("data.num_threads", self.num_threads, minimum=1)
        _auto_or_int("data.pack_threads", self.pack_threads, minimum=1)
        if self.prefetch < 1:
            raise ConfigError("data.prefetch must be >= 1")
        if self.pin_memory != "auto" and not isinstance(self.pin_memory, bool):
            raise ConfigError(f"data.pin_memory={self.pin_memory!r}: use auto, true or false")


# ---------------------------------------------------------------- precision
@dataclass
class PrecisionConfig:
    name: str = MISSING  # fp32 | amp
    dtype: str = "auto"  # amp only: auto | bf16 | fp16
    tf32: bool = False  # fp32 only: allow TF32 matmuls/convolutions on CUDA

    def __post_init__(self) -> None:
        _one_of("precision.name", self.name, ("fp32", "amp"))
        _one_of("precision.dtype", self.dtype, ("auto", "bf16", "fp16"))


# ---------------------------------------------------------------- compile
@dataclass
class CompileConfig:
    name: str = MISSING  # the choice: off | default | reduce-overhead | max-autotune
    mode: Optional[str] = None  # torch.compile(mode=...); None with name=off means eager
    backend: str = "inductor"
    fullgraph: bool = False
    dynamic: Optional[bool] = False  # fixed shapes: drop_last keeps the batch constant

    def __post_init__(self) -> None:
        _one_of("compile.name", self.name, ("off", "default", "reduce-overhead", "max-autotune"))


# ---------------------------------------------------------------- launcher
@dataclass
class SingleLauncherConfig:
    name: str = "single"
    # Run training in a fresh process, so no job inherits another's CUDA, compile or worker state.
    # false runs it inside the Hydra process (a debugger can step in; sweeps lose that isolation).
    fresh_process: bool = True


@dataclass
class DdpLauncherConfig:
    """launcher=ddp: DistributedDataParallel workers started by torch's elastic launcher."""

    name: str = "ddp"
    nproc_per_node: Any = "auto"  # processes on this machine; auto = visible GPUs, or 2 on a CPU
    nnodes: int = 1  # machines; each runs `python -m fastpipe launcher=ddp ...` (or torchrun)
    node_rank: int = 0  # rdzv_backend=static only: this machine's index (c10d assigns it itself)
    rdzv_backend: str = "c10d"
    rdzv_endpoint: Optional[str] = None  # HOST:PORT on node 0; null (one node) = localhost, free port
    rdzv_id: str = "fastpipe"  # names the job at the endpoint: the same on every node of one job
    backend: str = "auto"  # auto = nccl on CUDA, gloo on CPU
    max_restarts: int = 0  # restarts of all workers after a failure (0: a failure ends the job)
    # Seconds for the rendezvous and for any one collective: a rank that hangs or vanishes ends the
    # job with an error after this long instead of blocking the others forever.
    timeout_s: int = 600
    # Workers are always fresh processes (one elastic launch per job); false is refused unless
    # fastpipe itself runs under torchrun/srun, where the Hydra process is the rank.
    fresh_process: bool = True
    # DistributedDataParallel's gradient bucket size (MB): each bucket's all-reduce starts as soon as
    # its gradients are ready, so smaller buckets overlap sooner and larger ones launch fewer
    # collectives. null = DDP's own default: 25 MB buckets after a 1 MB first one (a number, even 25,
    # makes every bucket that size).
    bucket_cap_mb: Optional[float] = None
    # How gradients travel: none = as computed (fp32); bf16 / fp16 = compressed to 16 bits for the
    # all-reduce and decompressed after it (DDP's bf16/fp16_compress_hook: half the bytes on the link).
    comm_hook: str = "none"
    # DDP's default re-sends rank 0's buffers (BatchNorm running statistics) to every rank at the start
    # of each forward; false skips that per-step broadcast (each rank keeps its own statistics).
    broadcast_buffers: bool = True

    def __post_init__(self) -> None:
        _auto_or_int("launcher.nproc_per_node", self.nproc_per_node, minimum=1)
        _one_of("launcher.comm_hook", self.comm_hook, ("none", "bf16", "fp16"))
        if self.bucket_cap_mb is not None and self.bucket_cap_mb <= 0:
            raise ConfigError(f"launcher.bucket_cap_mb={self.bucket_cap_mb} must be > 0 (megabytes per "
                              "gradient bucket), or null for DDP's default")
        _one_of("launcher.backend", self.backend, ("auto", "nccl", "gloo"))
        _one_of("launcher.rdzv_backend", self.rdzv_backend, ("c10d", "static", "etcd", "etcd-v2"))
        if self.nnodes < 1 or self.max_restarts < 0 or self.timeout_s < 1 or self.node_rank < 0:
            raise ConfigError("launcher.nnodes and launcher.timeout_s must be >= 1, launcher.max_restarts "
                              "and launcher.node_rank >= 0")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ConfigError(f"launcher.nnodes={self.nnodes} needs launcher.rdzv_endpoint=HOST:PORT "
                              "(a port on node 0 that every node can reach)")


# ---------------------------------------------------------------- profile
@dataclass
class ProfileConfig:
    name: str = "off"  # off | on
    skip_first: int = 0  # steps before the schedule starts
    wait: int = 5  # steps idle per cycle (past warm-up and compilation)
    warmup: int = 2  # steps traced but discarded (the profiler's own start-up cost)
    active: int = 5  # steps recorded per cycle
    repeat: int = 1  # cycles (each writes one trace file)
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False

    def __post_init__(self) -> None:
        _one_of("profile.name", self.name, ("off", "on"))
        if min(self.skip_first, self.wait, self.warmup) < 0 or min(self.active, self.repeat) < 1:
            raise ConfigError("profile.skip_first/wait/warmup must be >= 0, profile.active/repeat >= 1")


# ---------------------------------------------------------------- top level
@dataclass
class TrainConfig:
    epochs: int = 3
    max_steps: Optional[int] = None  # cap on optimizer steps over the whole run
    batch_size: int = 64  # per process
    lr: float = 0.05  # peak learning rate
    lr_schedule: str = "cosine"  # cosine (linear warm-up, then cosine decay to 0) | constant
    lr_warmup_steps: int = 0
    optimizer: str = "sgd"  # sgd | adamw
    momentum: float = 0.9  # sgd only
    weight_decay: float = 5e-4
    grad_accum: int = 1  # micro-batches per optimizer step
    max_nonfinite_steps: int = 20  # stop after this many non-finite losses in a row
    checkpoint_every: Optional[int] = 0  # steps between checkpoints in <run>/checkpoints; 0/null = off
    keep_checkpoints: int = 3  # the newest K checkpoints are kept
    resume: Optional[str] = None  # auto (newest good checkpoint of this run folder) | PATH | null

    def __post_init__(self) -> None:
        _one_of("train.optimizer", self.optimizer, ("sgd", "adamw"))
        _one_of("train.lr_schedule", self.lr_schedule, ("cosine", "constant"))
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


@dataclass
class RuntimeConfig:
    cudnn_benchmark: bool = True
    channels_last: Any = "auto"  # auto = on for conv nets on CUDA
    cuda_alloc_conf: Optional[str] = None  # PYTORCH_CUDA_ALLOC_CONF, set before CUDA initialises
    progress: bool = True  # tqdm progress bar

    def __post_init__(self) -> None:
        if self.channels_last != "auto" and not isinstance(self.channels_last, bool):
            raise ConfigError(f"runtime.channels_last={self.channels_last!r}: use auto, true or false")


@dataclass
class MeasureConfig:
    warmup_steps: int = 5  # excluded from throughput (compilation happens here)
    window: int = 10  # steps per timing window; step-time median/p90 are over windows
    gpu_util_interval_s: float = 0.1  # NVML sampling period

    def __post_init__(self) -> None:
        if self.warmup_steps < 1 or self.window < 1:
            raise ConfigError("measure.warmup_steps and measure.window must be >= 1")


@dataclass
class ReportConfig:
    """How a sweep's report compares its jobs (fastpipe/report/sweep.py)."""

    # null = the job with the first listed value of every swept key; or overrides naming the job,
    # "precision=amp,compile=off" (quoted for Hydra: 'report.baseline="precision=amp,compile=off"'),
    # or a job number.
    baseline: Optional[str] = None
    parity_tol: float = 0.01  # accuracy may fall this much (absolute, 0..1) below the baseline's
    repeats: int = 1  # measure each combination this many times; the report shows median and spread

    def __post_init__(self) -> None:
        if not 0.0 <= self.parity_tol <= 1.0:
            raise ConfigError(f"report.parity_tol={self.parity_tol} must lie in [0, 1] (accuracy is 0..1)")
        if self.repeats < 1:
            raise ConfigError(f"report.repeats={self.repeats} must be >= 1")


@dataclass
class SweepConfig:
    resume: bool = False  # skip jobs whose metrics.json in this sweep folder says they finished ok


@dataclass
class Config:
    dataset: Any = MISSING
    model: Any = MISSING
    data: Any = MISSING
    precision: Any = MISSING
    compile: Any = MISSING
    launcher: Any = MISSING
    profile: Any = None  # a ProfileConfig (profile=off|on); None = off
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda
    train: TrainConfig = field(default_factory=TrainConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    # Filled by the entry point from Hydra's runtime, for the record (metrics.json, reports):
    overrides: List[str] = field(default_factory=list)
    choices: Dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _one_of("device", self.device, ("auto", "cpu", "cuda"))


SCHEMAS = {
    "dataset": {"dataset": DatasetConfig},
    "model": {"model": ModelConfig},
    "data": {"default": DefaultLoaderConfig, "dali": DaliLoaderConfig, "mmap": MmapLoaderConfig},
    "precision": {"precision": PrecisionConfig},
    "compile": {"compile": CompileConfig},
    "launcher": {"single": SingleLauncherConfig, "ddp": DdpLauncherConfig},
    "profile": {"profile": ProfileConfig},
}


def register_configs() -> None:
    """Register the root schema and each group's schemas (named ``schema_<name>``)."""
    cs = ConfigStore.instance()
    cs.store(name="fastpipe_schema", node=Config)
    for group, schemas in SCHEMAS.items():
        for name, node in schemas.items():
            cs.store(group=group, name=f"schema_{name}", node=node)


def to_settings(cfg: DictConfig) -> Config:
    """Convert the composed config to dataclasses (running every schema's validation)."""
    try:
        return OmegaConf.to_object(cfg)
    except ConfigError:
        raise
    except Exception as exc:  # OmegaConf's own messages name the key; keep them
        raise ConfigError(str(exc).splitlines()[0]) from exc
