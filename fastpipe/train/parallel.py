"""The ``launcher`` group's stage of the training graph: the model placed across the processes.

launcher=single and ddp replicate it (a whole copy on each process, constructed directly on the
training device, wrapped in DistributedDataParallel when several train); launcher=fsdp shards it with
FSDP2: built on the meta device, its blocks made units, then materialised shard by shard
(stages/fsdp.py), so a model larger than one GPU never exists whole. Before either, the precision
prepares the bare model (precision=fp8 swaps its Linear layers). ``replicate`` and ``shard`` are the launchers' registered builders
(config/launcher.py); the ``Parallel`` they return also owns the gradient no-sync of accumulation.
"""
from __future__ import annotations

import contextlib
import inspect
import time
from dataclasses import dataclass, field
from typing import ContextManager, Dict, Tuple

import torch
from torch import nn

from fastpipe.config import DdpLauncherConfig, FsdpLauncherConfig, LauncherConfig, ModelConfig, RuntimeConfig
from fastpipe.models import build_model, enable_activation_checkpointing, is_conv_net
from fastpipe.runtime import Runtime
from fastpipe.stages.precision import Precision


@dataclass(frozen=True)
class ModelSpec:
    """What building the model takes: its config, what the dataset tells it (num_classes, vocab_size...),
    its choice's name (for messages) and the runtime settings that pick its memory format."""

    cfg: ModelConfig
    dataset_facts: Dict[str, int] = field(default_factory=dict)
    choice: str = ""
    memory: RuntimeConfig = field(default_factory=RuntimeConfig)

    def build(self, device=None) -> nn.Module:
        """The model, constructed on ``device`` (its own initialisation runs there; ``"meta"``: nothing
        allocated), or on the host when None."""
        return build_model(self.cfg, self.dataset_facts, self.choice, device=device)


@dataclass(frozen=True)
class Parallel:
    """The placed model: the bare one (evaluation runs it, checkpoints save it), the one that trains
    (the same, its DDP wrapper, or the sharded root), and how gradients are kept in step."""

    model: nn.Module
    train_module: nn.Module
    channels_last: bool
    description: str  # graph.txt's parallel line
    sharded: bool = False  # FSDP: every rank must run each forward (evaluation too) together
    units: Tuple[nn.Module, ...] = ()  # launcher.compile_per_block: the FSDP units, compiled one by one
    build_s: float = 0.0  # constructing and initialising the model on its device (or sharding it), synced
    built_on: str = ""  # where: the device, or "meta, sharded"

    def sync(self, last_micro: bool) -> ContextManager:
        """Skip the gradient reduction on all but the last micro-batch of an accumulation (DDP's
        ``no_sync``; FSDP2's ``set_requires_gradient_sync``, which keeps unsharded gradients meanwhile)."""
        if hasattr(self.train_module, "set_requires_gradient_sync"):
            self.train_module.set_requires_gradient_sync(last_micro)
            return contextlib.nullcontext()
        if last_micro or not hasattr(self.train_module, "no_sync"):
            return contextlib.nullcontext()
        return self.train_module.no_sync()

    def describe(self) -> str:
        return self.description


def wrap_data_parallel(model: nn.Module, runtime: Runtime, launcher: DdpLauncherConfig) -> nn.Module:
    """DistributedDataParallel when several processes train (bucket size, gradient compression and the
    buffer broadcast per ``launcher``); the model itself otherwise."""
    if runtime.dist.world_size == 1:
        return model
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    ids = [runtime.device.index] if runtime.device.type == "cuda" else None
    # torch >= 2.13 names the per-forward buffer broadcast forward_sync_buffers (broadcast_buffers warns, deprecated)
    takes = inspect.signature(nn.parallel.DistributedDataParallel).parameters
    buffers = {"forward_sync_buffers" if "forward_sync_buffers" in takes else "broadcast_buffers": launcher.broadcast_buffers}
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True,
                                              bucket_cap_mb=launcher.bucket_cap_mb, **buffers,
                                              static_graph=launcher.static_graph,
                                              find_unused_parameters=launcher.find_unused_parameters)
    hook = {"bf16": default_hooks.bf16_compress_hook, "fp16": default_hooks.fp16_compress_hook}.get(launcher.comm_hook)
    if hook is not None:  # state=None: the default process group
        ddp.register_comm_hook(None, hook)
    return ddp


def replicate(spec: ModelSpec, launcher: LauncherConfig, runtime: Runtime, precision: Precision) -> Parallel:
    """launcher=single / ddp: the model built on this device (activation checkpointing and channels_last
    as asked), wrapped in DDP when several processes train. ``precision`` is autocast's: nothing to place."""
    device, started = runtime.device, time.perf_counter()
    model = spec.build(device)
    precision.prepare(model, device)
    if spec.cfg.activation_checkpointing:
        enable_activation_checkpointing(model)
    channels_last = spec.memory.use_channels_last(is_conv_net(model), device.type)
    model = model.to(device, memory_format=torch.channels_last if channels_last else torch.preserve_format)
    built = _synced_seconds(started, device)
    train_module = wrap_data_parallel(model, runtime, launcher)
    text = f"{type(train_module).__name__}  launcher={launcher.name}"
    if train_module is not model:
        bucket = "default" if launcher.bucket_cap_mb is None else format(launcher.bucket_cap_mb, "g")
        text += (f"  bucket_cap_mb={bucket}  comm_hook={launcher.comm_hook}"
                 f"  broadcast_buffers={launcher.broadcast_buffers}  static_graph={launcher.static_graph}")
    return Parallel(model, train_module, channels_last, text, build_s=built, built_on=str(device))


def shard(spec: ModelSpec, launcher: FsdpLauncherConfig, runtime: Runtime, precision: Precision) -> Parallel:
    """launcher=fsdp: the model built on the meta device, its blocks checkpointed (if asked) and sharded
    with ``precision``'s MixedPrecisionPolicy, then materialised shard by shard (stages/fsdp.py)."""
    from fastpipe.stages import fsdp

    fsdp.require_fsdp2()
    started = time.perf_counter()
    model = spec.build("meta")
    precision.prepare(model, runtime.device)  # fp8: Float8Linear layers, sharded as such
    blocks = fsdp.units(model, launcher.shard)
    if spec.cfg.activation_checkpointing:
        enable_activation_checkpointing(model, blocks)
    sharding = fsdp.shard(model, blocks, launcher, runtime.device, fsdp.mixed_precision(precision.dtype))
    return Parallel(model, model, False, f"launcher=fsdp  {sharding}", sharded=True,
                    units=tuple(blocks) if launcher.compile_per_block else (),
                    build_s=_synced_seconds(started, runtime.device), built_on="meta, sharded")


def _synced_seconds(started: float, device: torch.device) -> float:
    """Seconds since ``started`` once the device has finished the work queued (initialisation kernels)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started
