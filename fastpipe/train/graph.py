"""Compose the chosen stages into a training graph: ``build(settings, runtime)``, then ``describe()``.

Stages, in order: dataset -> task -> model (+ activation checkpointing, channels_last) -> data-parallel
wrap -> precision -> compile -> optimizer -> loaders. Each stage is built by its group's one builder.
launcher=fsdp builds the model on the meta device and shards it before anything is allocated.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import List

import torch
from torch import nn

from fastpipe.stages.compile import CompiledModel, build_compiled
from fastpipe.config import Config, DdpLauncherConfig
from fastpipe.data import build_loader
from fastpipe.data.splits import DataSplits, build_dataset
from fastpipe.stages.ema import build_ema
from fastpipe.errors import ConfigError
from fastpipe.models import build_model, enable_activation_checkpointing, is_conv_net
from fastpipe.stages.optim import build_optimizer, describe_optimizer, lr_factor
from fastpipe.stages.precision import Precision, build_precision
from fastpipe.runtime import Runtime, gather_objects
from fastpipe.stages.batch_recipe import build_batch_recipe
from fastpipe.stages.schedules import Schedule, build_schedule
from fastpipe.config.data import resize_schedule
from fastpipe.stages.tasks import check_task
from fastpipe.train.target import check_target_run


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
    schedule: Schedule = None  # the learning-rate schedule over total_steps
    ema: object = None  # an AveragedModel of the weights (train.ema_decay), or None
    sharding: str = ""  # launcher=fsdp: how the model is sharded (graph.txt), else empty
    batch_search: object = None  # train.batch_size=auto: the BatchSearch that chose the batch size
    batch_recipe: object = None  # MixUp/CutMix and the resize schedule (stages/batch_recipe.py), or None
    target_loader: object = None  # train.target_eval_samples: the held-out split's first N samples

    @property
    def sharded(self) -> bool:
        """True under launcher=fsdp: every rank must run each forward (evaluation too) together."""
        return bool(self.sharding)

    @property
    def steps_per_epoch(self) -> int:
        return len(self.train_loader) // self.settings.train.grad_accum

    @property
    def total_steps(self) -> int:
        return total_steps(self.settings.train, self.steps_per_epoch)

    @property
    def lr_factor(self) -> float:
        return lr_factor(self.settings.train, self.runtime.dist.world_size)

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
        """Skip the gradient reduction on all but the last micro-batch of an accumulation (DDP's
        ``no_sync``; FSDP2's ``set_requires_gradient_sync``, which keeps unsharded gradients meanwhile)."""
        if hasattr(self.train_module, "set_requires_gradient_sync"):
            self.train_module.set_requires_gradient_sync(sync)
            return contextlib.nullcontext()
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
        steps = self.steps_per_epoch
        held_out = "no" if self.dataset.val is None else len(self.dataset.val) if hasattr(self.dataset.val, "__len__") \
            else "a stream of"
        task = type(self.task).__name__
        direction = "higher" if self.task.higher_is_better else "lower"
        rows = [
            ("runtime", f"device={self.device}  world_size={d.world_size}  seed={s.seed}  "
                        f"cudnn.benchmark={s.runtime.cudnn_benchmark}  channels_last={self.channels_last}"),
            ("dataset", self.dataset.describe()),
            ("loader", f"data={self.train_loader.describe()}  batch_size={s.train.batch_size}/process"
                       + (f" {self.batch_search.describe()}" if self.batch_search is not None else "")),
            ("task", f"{task}  primary metric: {self.task.primary} ({direction} is better)"),
            ("model", f"{s.model.target}  params={params / 1e6:.2f}M"
                      + ("  activation_checkpointing" if s.model.activation_checkpointing else "")),
            ("parallel", f"launcher=fsdp  {self.sharding}" if self.sharded else
                         f"{type(self.train_module).__name__}  launcher={s.launcher.name}" + (
                f"  bucket_cap_mb={'default' if s.launcher.bucket_cap_mb is None else format(s.launcher.bucket_cap_mb, 'g')}"
                f"  comm_hook={s.launcher.comm_hook}"
                f"  broadcast_buffers={s.launcher.broadcast_buffers}  static_graph={s.launcher.static_graph}"
                if self.train_module is not self.model else "")),
            ("precision", self.precision.describe()),
            ("compile", self.compiled.describe()),
            ("optimizer", f"{describe_optimizer(self.optimizer)}  grad_accum={s.train.grad_accum}"
                          + (f"  (lr_scaling={s.train.lr_scaling}: x{self.lr_factor:.4g} for a global batch of "
                             f"{s.train.batch_size * s.train.grad_accum * d.world_size} against "
                             f"{s.train.lr_reference_batch})" if s.train.lr_scaling != "none" else "")
                          + (f"  clip_grad_norm={s.train.clip_grad_norm}" if s.train.clip_grad_norm else "")),
            ("schedule", f"{self.schedule.describe()} over {self.total_steps} steps"
                         + (f"  EMA of the weights (decay {s.train.ema_decay}): its metrics count" if self.ema else "")),
            ("loop", f"epochs={s.train.epochs}  steps/epoch={steps}  max_steps={s.train.max_steps}  "
                     f"eval each epoch{f' and every {s.train.eval_every} steps' if s.train.eval_every else ''} on "
                     f"{held_out} held-out samples"
                     + (f"  early stop after {s.train.early_stop_patience} without gain" if s.train.early_stop_patience
                        else "")
                     + (f"  target {self.task.primary} {'>=' if self.task.higher_is_better else '<='} "
                        f"{s.train.target:g}" + (f" (screened on the first {s.train.target_eval_samples} held-out "
                                                 "samples)" if s.train.target_eval_samples else "")
                        if s.train.target is not None else "")
                     + (f"  time budget {s.train.time_budget_s:g} s" if s.train.time_budget_s else "")),
            *([("batches", self.batch_recipe.describe())] if self.batch_recipe is not None else []),
            ("measure", f"warm-up {s.measure.warmup_steps} steps excluded  windows of {s.measure.window} steps"),
        ]
        lines = ["fastpipe training graph"] + [f"  {i + 1:>2}. {name:<10} {text}" for i, (name, text) in enumerate(rows)]
        return "\n".join(lines)


def total_steps(cfg, steps_per_epoch: int) -> int:
    """The run's optimizer steps: epochs x steps per epoch, or train.max_steps when smaller."""
    full = steps_per_epoch * cfg.epochs
    return full if cfg.max_steps is None else min(cfg.max_steps, full)


def wrap_data_parallel(model: nn.Module, runtime: Runtime, launcher: DdpLauncherConfig) -> nn.Module:
    """DistributedDataParallel when several processes train (bucket size, gradient compression and the
    buffer broadcast per ``launcher``); the model itself otherwise."""
    if runtime.dist.world_size == 1:
        return model
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    ids = [runtime.device.index] if runtime.device.type == "cuda" else None
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True,
                                              bucket_cap_mb=launcher.bucket_cap_mb,
                                              broadcast_buffers=launcher.broadcast_buffers,
                                              static_graph=launcher.static_graph)
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
    if settings.train.target is not None:
        check_target_run(settings, dataset, task)
    if settings.launcher.name == "fsdp":
        return _build_sharded(settings, runtime, warnings, dataset, task)
    model = build_model(settings.model, dataset.model_kwargs(), settings.choices.get("model", ""))
    if settings.model.activation_checkpointing:
        enable_activation_checkpointing(model)
    channels_last = settings.runtime.use_channels_last(is_conv_net(model), device.type)
    model = model.to(device, memory_format=torch.channels_last if channels_last else torch.preserve_format)
    train_module = wrap_data_parallel(model, runtime, settings.launcher)
    precision = build_precision(settings.precision, device)
    if settings.compile.optimize_ddp != "auto" and settings.launcher.name != "ddp":
        warnings.append(f"compile.optimize_ddp={settings.compile.optimize_ddp} shapes how Dynamo compiles a DDP "
                        f"model; with launcher={settings.launcher.name} it does nothing")
    compiled = build_compiled(settings.compile, train_module, device, warnings)
    return _finish(settings, runtime, dataset, task, model, train_module, precision, compiled, channels_last,
                   build_ema(model, settings.train.ema_decay))


def _build_sharded(settings: Config, runtime: Runtime, warnings: List[str], dataset, task) -> TrainingGraph:
    """launcher=fsdp: the model built on the meta device, its blocks checkpointed (if asked), compiled per
    unit (if asked) and sharded, then materialised shard by shard (fsdp.py)."""
    from fastpipe.stages import fsdp

    fsdp.require_fsdp2()
    if settings.train.ema_decay is not None:
        raise ConfigError("train.ema_decay with launcher=fsdp: the average would be a second sharded copy of the "
                          "model, which fastpipe does not keep; drop train.ema_decay, or use launcher=ddp")
    device, cfg = runtime.device, settings.launcher
    with torch.device("meta"):
        model = build_model(settings.model, dataset.model_kwargs(), settings.choices.get("model", ""))
    blocks = fsdp.units(model, cfg.shard)
    if settings.model.activation_checkpointing:
        enable_activation_checkpointing(model, blocks)
    precision = build_precision(settings.precision, device, by_fsdp=True)
    sharding = fsdp.shard(model, blocks, cfg, device, fsdp.mixed_precision(precision.dtype))
    per_block = cfg.compile_per_block and settings.compile.name != "off"
    compiled = build_compiled(settings.compile, model, device, warnings, units=blocks if per_block else None)
    graph = _finish(settings, runtime, dataset, task, model, model, precision, compiled, False, None)
    graph.sharding = sharding
    return graph


def _finish(settings: Config, runtime: Runtime, dataset, task, model, train_module, precision, compiled,
            channels_last: bool, ema) -> TrainingGraph:
    """The stages after the model: optimizer, loaders, schedule."""
    device = runtime.device
    optimizer = build_optimizer(settings.optimizer, settings.train, model, device,
                                lr_factor(settings.train, runtime.dist.world_size))
    loader_args = (settings.data, dataset, runtime, settings.train.batch_size, settings.seed)
    train_loader = build_loader(*loader_args, train=True, channels_last=channels_last)
    eval_loader = build_loader(*loader_args, train=False, channels_last=channels_last)
    if len(train_loader) < settings.train.grad_accum:
        raise ConfigError(f"train.grad_accum={settings.train.grad_accum} exceeds the {len(train_loader)} "
                          "batches of an epoch; lower it or train.batch_size")
    steps = total_steps(settings.train, len(train_loader) // settings.train.grad_accum)
    schedule = build_schedule(settings.lr_schedule, optimizer, steps, lr_factor(settings.train, runtime.dist.world_size))
    images = True if dataset.is_images or dataset.fact("image_size") else False if dataset.fact("vocab_size") else None
    recipe = build_batch_recipe(settings.train, resize_schedule(settings.data.resize_schedule), task,
                                settings.choices.get("task") or settings.task.short_name, dataset.fact("num_classes"),
                                steps, dataset.name, images)
    target_loader = None if settings.train.target_eval_samples is None else build_loader(
        *loader_args, train=False, channels_last=channels_last, limit=settings.train.target_eval_samples)
    return TrainingGraph(settings, runtime, dataset, task, model, train_module, precision, compiled, optimizer,
                         train_loader, eval_loader, channels_last, schedule, ema, batch_recipe=recipe,
                         target_loader=target_loader)

