"""The ``launcher`` group: where the training processes come from (docs/distributed.md)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

from fastpipe.config._checks import auto_or_bool, auto_or_int, one_of
from fastpipe.config.registry import register
from fastpipe.errors import ConfigError


@register("launcher", "single", builder="fastpipe.train.parallel:replicate")
@dataclass
class SingleLauncherConfig:
    name: str = "single"  # the choice: launcher=single
    # auto: a single run trains in the process the user started, each sweep job and each repeat in a fresh
    # process of its own (none inherits another's CUDA, compile or worker state). true: every job in a
    # fresh process, a single run too. false: every job in the process that launches it (a debugger
    # steps into each; sweep jobs lose their isolation).
    fresh_process: Any = "auto"

    def __post_init__(self) -> None:
        auto_or_bool("launcher.fresh_process", self.fresh_process)


@dataclass
class ProcessGroupLauncherConfig:
    """What launcher=ddp and launcher=fsdp share: worker processes started by torch's elastic launcher
    (or joined from torchrun/srun) that form one process group."""

    name: str = "ddp"  # the choice: launcher=ddp | fsdp
    nproc_per_node: Any = "auto"  # processes on this machine; auto = one per visible GPU, or 2 on a CPU
    nnodes: int = 1  # machines; each runs `python -m fastpipe launcher=ddp ...` (or torchrun)
    node_rank: int = 0  # rdzv_backend=static only: this machine's index (c10d assigns it itself)
    rdzv_backend: str = "c10d"  # how the nodes meet: c10d (at rdzv_endpoint) | static (node_rank) | etcd | etcd-v2
    rdzv_endpoint: Optional[str] = None  # HOST:PORT on node 0; null (one node) = localhost, a free port
    rdzv_id: str = "fastpipe"  # names the job at the endpoint: the same on every node of one job
    backend: str = "auto"  # process-group backend; auto = nccl on CUDA, gloo on the CPU
    max_restarts: int = 0  # restarts of all workers after a failure (0: a failure ends the job)
    # Seconds for the rendezvous and for any one collective: a rank that hangs or vanishes ends the
    # job with an error after this long instead of blocking the others forever.
    timeout_s: int = 600
    # Workers are always fresh processes (one elastic launch per job); false is refused unless
    # fastpipe itself runs under torchrun/srun, where its process is the rank.
    fresh_process: bool = True

    def __post_init__(self) -> None:
        auto_or_int("launcher.nproc_per_node", self.nproc_per_node, minimum=1)
        one_of("launcher.backend", self.backend, ("auto", "nccl", "gloo"))
        one_of("launcher.rdzv_backend", self.rdzv_backend, ("c10d", "static", "etcd", "etcd-v2"))
        if self.nnodes < 1 or self.max_restarts < 0 or self.timeout_s < 1 or self.node_rank < 0:
            raise ConfigError("launcher.nnodes and launcher.timeout_s must be >= 1, launcher.max_restarts "
                              "and launcher.node_rank >= 0")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ConfigError(f"launcher.nnodes={self.nnodes} needs launcher.rdzv_endpoint=HOST:PORT "
                              "(a port on node 0 that every node can reach)")

    def processes(self, gpus: int, cores: int) -> int:
        """Processes on this machine: ``auto`` = one per visible GPU, or 2 on a CPU (a CPU run gets
        at most one process per core: more would only wait for each other)."""
        if self.nproc_per_node == "auto":
            return gpus or min(2, cores)
        if gpus and self.nproc_per_node > gpus:
            raise ConfigError(f"launcher.nproc_per_node={self.nproc_per_node} but {gpus} GPU(s) are visible; "
                              f"launcher={self.name} runs one process per GPU: lower it, or use "
                              "launcher.nproc_per_node=auto")
        if not gpus and self.nproc_per_node > cores:
            raise ConfigError(f"launcher.nproc_per_node={self.nproc_per_node} but this run may use {cores} CPU "
                              f"core(s) (its CPU affinity) and no GPU; use at most {cores} (or "
                              "launcher.nproc_per_node=auto)")
        return self.nproc_per_node

    def backend_for(self, device_type: str) -> str:
        """The process-group backend: ``auto`` is nccl on CUDA, gloo on the CPU."""
        if self.backend == "auto":
            return "nccl" if device_type == "cuda" else "gloo"
        if self.backend == "nccl" and device_type != "cuda":
            raise ConfigError("launcher.backend=nccl needs CUDA devices but training runs on the CPU; "
                              "use launcher.backend=auto or gloo")
        return self.backend


@register("launcher", "ddp", builder="fastpipe.train.parallel:replicate", process_group=True, ddp=True)
@dataclass
class DdpLauncherConfig(ProcessGroupLauncherConfig):
    """launcher=ddp: every process holds the whole model; DistributedDataParallel all-reduces gradients."""

    name: str = "ddp"  # the choice: launcher=ddp
    # Gradient bucket size (MB): each bucket's all-reduce starts as soon as its gradients are ready,
    # so smaller buckets overlap sooner and larger ones launch fewer collectives. null = DDP's own
    # default, 25 MB buckets after a 1 MB first one (a number, even 25, makes every bucket that size).
    bucket_cap_mb: Optional[float] = None
    # How gradients travel: none = as computed (fp32); bf16 / fp16 = compressed to 16 bits for the
    # all-reduce and decompressed after it (DDP's bf16/fp16_compress_hook: half the bytes on the link).
    comm_hook: str = "none"
    # DDP's default re-sends rank 0's buffers (BatchNorm running statistics) to every rank at the start
    # of each forward; false skips that per-step broadcast (each rank keeps its own statistics).
    broadcast_buffers: bool = True
    # DDP's static_graph: the set of parameters that get gradients never changes (which may include
    # some that never get one), so DDP reuses its bucket order after the first step.
    static_graph: bool = False
    # DDP's find_unused_parameters: a model whose forward leaves some parameters out (an auxiliary head
    # used on some steps only) has them found each step, at the cost of a graph traversal per step;
    # without it DDP fails at the second step. static_graph=true serves a set that never changes.
    find_unused_parameters: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        one_of("launcher.comm_hook", self.comm_hook, ("none", "bf16", "fp16"))
        if self.bucket_cap_mb is not None and self.bucket_cap_mb <= 0:
            raise ConfigError(f"launcher.bucket_cap_mb={self.bucket_cap_mb} must be > 0 (megabytes per "
                              "gradient bucket), or null for DDP's default")


@register("launcher", "fsdp", builder="fastpipe.train.parallel:shard", process_group=True, shards=True)
@dataclass
class FsdpLauncherConfig(ProcessGroupLauncherConfig):
    """launcher=fsdp: parameters, gradients and optimizer state sharded over the processes by PyTorch's
    FSDP2 (``fully_shard``); the processes start as launcher=ddp's do."""

    name: str = "fsdp"  # the choice: launcher=fsdp
    # The modules that become FSDP units, each gathering its parameters just before it runs: auto =
    # the model's repeated blocks (the modules of its nn.ModuleList, e.g. a GPT's layers); or a list of
    # class names, e.g. [Block]. The root is sharded last and holds what no unit took.
    shard: Any = "auto"
    # Free each unit's gathered parameters after its forward (and gather them again for backward):
    # less memory for one more all-gather per unit.
    reshard_after_forward: bool = True
    # torch.compile each unit on its own instead of the whole model (the compile group's mode).
    compile_per_block: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.shard != "auto" and not (isinstance(self.shard, list) and self.shard
                                         and all(isinstance(c, str) for c in self.shard)):
            raise ConfigError(f"launcher.shard={self.shard!r}: use auto, or a list of module class names "
                              "(e.g. [Block])")


LauncherConfig = Union[SingleLauncherConfig, DdpLauncherConfig, FsdpLauncherConfig]
