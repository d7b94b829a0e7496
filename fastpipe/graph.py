"""Compose the chosen stages into a training graph: ``build(settings, runtime)``, then ``describe()``.

Stages, in order: dataset -> task -> model (+ activation checkpointing, channels_last) -> data-parallel
wrap -> precision -> compile -> optimizer -> loaders. Each stage is built by its group's one builder.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import List

import torch
from torch import nn

from fastpipe.compile import CompiledModel, build_compiled
from fastpipe.config import Config, DdpLauncherConfig
from fastpipe.data import build_loader
from fastpipe.data.splits import DataSplits, build_dataset
from fastpipe.errors import ConfigError
from fastpipe.models import build_model, enable_activation_checkpointing, is_conv_net
from fastpipe.optim import build_optimizer, describe_optimizer
from fastpipe.precision import Precision, build_precision
from fastpipe.runtime import Runtime, gather_objects
from fastpipe.tasks import check_task


@dataclass
class TrainingGraph:
    settings: Config
    runtime: Runtime
    dataset: DataSplits
    task: object
    model: nn.Module  # the bare model (evaluation runs it eagerly; parameters are shared)
    train_module: nn.Module  # what is compiled: the model, or its DistributedDataParallel wrapper
    precision: Precision
    compiled: CompiledModel
    optimizer: torch.optim.Optimizer
    train_loader: object
    eval_loader: object
    channels_last: bool

    @property
    def device(self) -> torch.device:
        return self.runtime.device

    @property
    def batch_size(self) -> int:
        return self.settings.train.batch_size

    @property
    def eval_module(self) -> nn.Module:
        return self.model

    def sync_context(self, sync: bool):
        """DDP: skip the gradient all-reduce on all but the last micro-batch of an accumulation."""
        if sync or not hasattr(self.train_module, "no_sync"):
            return contextlib.nullcontext()
        return self.train_module.no_sync()

    def any_rank(self, flag: torch.Tensor) -> torch.Tensor:
        """True on every rank when ``flag`` is true on any (a device-side all-reduce; no host sync)."""
        if self.runtime.dist.world_size == 1:
            return flag
        flag = flag.to(torch.int32)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        return flag.bool()

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.runtime.dist.world_size > 1:
            torch.distributed.all_reduce(tensor)
        return tensor

    def gather(self, value) -> list:
        """Every rank's ``value`` (picklable), in rank order; ``[value]`` for one process."""
        return gather_objects(value, self.runtime.dist.world_size)

    def describe(self) -> str:
        s, d = self.settings, self.runtime.dist
        params = sum(p.numel() for p in self.model.parameters())
        steps = len(self.train_loader) // s.train.grad_accum
        held_out = len(self.dataset.val) if self.dataset.val is not None else "no"
        task = type(self.task).__name__
        direction = "higher" if self.task.higher_is_better else "lower"
        rows = [
            ("runtime", f"device={self.device}  world_size={d.world_size}  seed={s.seed}  "
                        f"cudnn.benchmark={s.runtime.cudnn_benchmark}  channels_last={self.channels_last}"),
            ("dataset", self.dataset.describe()),
            ("loader", f"data={self.train_loader.describe()}  batch_size={s.train.batch_size}/process"),
            ("task", f"{task}  primary metric: {self.task.primary} ({direction} is better)"),
            ("model", f"{s.model.target}  params={params / 1e6:.2f}M"
                      + ("  activation_checkpointing" if s.model.activation_checkpointing else "")),
            ("parallel", f"{type(self.train_module).__name__}  launcher={s.launcher.name}" + (
                f"  bucket_cap_mb={'default' if s.launcher.bucket_cap_mb is None else format(s.launcher.bucket_cap_mb, 'g')}"
                f"  comm_hook={s.launcher.comm_hook}"
                f"  broadcast_buffers={s.launcher.broadcast_buffers}"
                if self.train_module is not self.model else "")),
            ("precision", self.precision.describe()),
            ("compile", self.compiled.describe()),
            ("optimizer", f"{describe_optimizer(self.optimizer)}  ({s.train.lr_schedule} schedule)  "
                          f"grad_accum={s.train.grad_accum}"),
            ("loop", f"epochs={s.train.epochs}  steps/epoch={steps}  max_steps={s.train.max_steps}  "
                     f"eval each epoch on {held_out} held-out samples"),
            ("measure", f"warm-up {s.measure.warmup_steps} steps excluded  windows of {s.measure.window} steps"),
        ]
        lines = ["fastpipe training graph"] + [f"  {i + 1:>2}. {name:<10} {text}" for i, (name, text) in enumerate(rows)]
        return "\n".join(lines)


def wrap_data_parallel(model: nn.Module, runtime: Runtime, launcher: DdpLauncherConfig) -> nn.Module:
    """DistributedDataParallel when several processes train (bucket size, gradient compression and the
    buffer broadcast per ``launcher``); the model itself otherwise."""
    if runtime.dist.world_size == 1:
        return model
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    ids = [runtime.device.index] if runtime.device.type == "cuda" else None
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True,
                                              bucket_cap_mb=launcher.bucket_cap_mb,
                                              broadcast_buffers=launcher.broadcast_buffers)
    hook = {"bf16": default_hooks.bf16_compress_hook, "fp16": default_hooks.fp16_compress_hook}.get(launcher.comm_hook)
    if hook is not None:  # state=None: the default process group
        ddp.register_comm_hook(None, hook)
    return ddp


def build(settings: Config, runtime: Runtime, warnings: List[str], progress: bool = False) -> TrainingGraph:
    """Build every stage for ``settings`` on ``runtime``."""
    device = runtime.device
    name = settings.choices.get("dataset") or settings.dataset.short_name
    dataset = build_dataset(settings.dataset, runtime, name, progress=progress)
    task = settings.task.build()
    check_task(task, settings.task.target)
    model = build_model(settings.model, dataset.model_kwargs(), settings.choices.get("model", ""))
    if settings.model.activation_checkpointing:
        enable_activation_checkpointing(model)
    channels_last = settings.runtime.use_channels_last(is_conv_net(model), device.type)
    model = model.to(device, memory_format=torch.channels_last if channels_last else torch.preserve_format)
    train_module = wrap_data_parallel(model, runtime, settings.launcher)
    precision = build_precision(settings.precision, device)
    compiled = build_compiled(settings.compile, train_module, device, warnings)
    optimizer = build_optimizer(settings.optimizer, settings.train, model, device)
    loader_args = (settings.data, dataset, runtime, settings.train.batch_size, settings.seed)
    train_loader = build_loader(*loader_args, train=True, channels_last=channels_last)
    eval_loader = build_loader(*loader_args, train=False, channels_last=channels_last)
    if len(train_loader) < settings.train.grad_accum:
        raise ConfigError(f"train.grad_accum={settings.train.grad_accum} exceeds the {len(train_loader)} "
                          "batches of an epoch; lower it or train.batch_size")
    return TrainingGraph(settings, runtime, dataset, task, model, train_module, precision, compiled, optimizer,
                         train_loader, eval_loader, channels_last)
