"""The one stage builder: training, the batch-size search and evaluation build their stages here.

Stages, in order: dataset -> task -> precision -> model placed by the launcher (activation
checkpointing, channels_last; a DDP replica, or FSDP2 shards from the meta device) -> compile ->
EMA -> optimizer -> loaders -> schedule. Each is built by its group's registered builder
(config/registry.py) from that group's schema alone. ``build`` makes a run's graph, ``build_probe``
the same stages at one batch size for the batch-size search, ``build_range_test`` the same stages for
the learning-rate range test, ``build_held_out`` what evaluating a trained model takes; graph.txt is assembled from each stage's own description (description.py).
"""
from __future__ import annotations

import copy
import dataclasses
import warnings
from dataclasses import dataclass
from typing import Dict, Optional

import torch
from torch import nn

from fastpipe.config import Config, DefaultLoaderConfig, LoaderConfig, TrainConfig
from fastpipe.config.data import resize_schedule
from fastpipe.config.registry import Choice, choice
from fastpipe.data import build_loader
from fastpipe.data.splits import DataSplits, build_dataset
from fastpipe.errors import ConfigError, FastpipeWarning
from fastpipe.measure.setup import setup_part
from fastpipe.protocols import Loader
from fastpipe.runtime import Dist, Runtime
from fastpipe.stages.batch_recipe import BatchRecipe, build_batch_recipe
from fastpipe.stages.compile import CompiledModel, build_compiled
from fastpipe.stages.ema import DeviceEMA, build_ema
from fastpipe.stages.eval_forward import EvalForwards
from fastpipe.stages.optim import build_optimizer, lr_factor
from fastpipe.stages.precision import Precision
from fastpipe.stages.schedules import Schedule, build_schedule
from fastpipe.stages.tasks import Task, build_task
from fastpipe.train.held_out import HeldOut, eval_batch_size, held_out_loaders
from fastpipe.train.parallel import ModelSpec, Parallel
from fastpipe.train.target import check_target_run

# The batch-size search feeds its probes from the dataset in this process: no worker processes to
# start, no pack to build for a size that is tried once.
PROBE_LOADER = DefaultLoaderConfig(num_workers=0, persistent_workers=False)


@dataclass(frozen=True)
class TrainingGraph:
    """A run's built stages, and the runtime (device, processes) they were built on."""

    runtime: Runtime
    dataset: DataSplits
    task: Task
    parallel: Parallel  # the model, the module that trains, and its gradient no-sync
    precision: Precision
    compiled: CompiledModel
    ema: Optional[DeviceEMA]  # train.ema_decay: an average of the weights; its metrics count
    optimizer: torch.optim.Optimizer
    train_loader: Loader
    eval_loader: Optional[Loader]  # None: the dataset holds nothing out
    schedule: Schedule
    batch_recipe: Optional[BatchRecipe] = None  # MixUp / CutMix and the resize schedule (stages/batch_recipe.py)
    target_loader: Optional[Loader] = None  # train.target_eval_samples: N held-out samples (data/held_out_batches.py)
    eval_forwards: Optional[EvalForwards] = None  # train.eval_fold: the folded evaluation forward
    rest_loader: Optional[Loader] = None  # the held-out samples the target's subset leaves out, where kept apart

    @property
    def model(self) -> nn.Module:
        """The bare model (evaluation runs it eagerly; the trained module shares its parameters)."""
        return self.parallel.model

    @property
    def device(self) -> torch.device:
        return self.runtime.device

    @property
    def sharded(self) -> bool:
        """True under launcher=fsdp: every rank must run each forward (evaluation too) together."""
        return self.parallel.sharded

    @property
    def held_out(self) -> HeldOut:
        return HeldOut(self.eval_loader, self.task, self.precision, self.device, self.runtime.dist, self.sharded,
                       self.eval_forwards)

    @property
    def target_held_out(self) -> Optional[HeldOut]:
        """The held-out subset of ``train.target_eval_samples`` samples the target screens on, or None."""
        return None if self.target_loader is None else dataclasses.replace(self.held_out, loader=self.target_loader)

    @property
    def target_rest(self) -> Optional[HeldOut]:
        """The rest of the held-out split beside the target's subset (a confirmation evaluates only
        these), or None."""
        return None if self.rest_loader is None else dataclasses.replace(self.held_out, loader=self.rest_loader)


def steps_per_epoch(g: TrainingGraph, cfg: TrainConfig) -> int:
    """Optimizer steps in an epoch: the training loader's batches over ``train.grad_accum``."""
    return len(g.train_loader) // cfg.grad_accum


def total_steps(cfg: TrainConfig, steps_per_epoch: int) -> int:
    """The run's optimizer steps: epochs x steps per epoch, or train.max_steps when smaller."""
    full = steps_per_epoch * cfg.epochs
    return full if cfg.max_steps is None else min(cfg.max_steps, full)


def with_batch_size(settings: Config, batch_size: int) -> Config:
    """``settings`` training at ``batch_size`` per process (a shallow copy: the Config's own post-init
    does not run twice)."""
    settings = copy.copy(settings)
    settings.train = dataclasses.replace(settings.train, batch_size=batch_size)
    return settings


def build_splits(settings: Config, runtime: Runtime, progress: bool = False, cut: bool = True) -> DataSplits:
    """The dataset stage: the project's callable, split into training and held-out parts; ``cut``: also
    cut to ``train.overfit_batches`` (``overfit_cut``), which needs the batch size resolved."""
    name = settings.choices.get("dataset") or settings.dataset.short_name
    if settings.train.overfit_batches:  # refused before anything is built or searched
        choice("data", settings.data.name).refuse_overfit_batches()
    with setup_part("dataset_index"):
        splits = build_dataset(settings.dataset, runtime, name, progress=progress)
    return overfit_cut(settings, runtime, splits) if cut else splits


def overfit_cut(settings: Config, runtime: Runtime, splits: DataSplits) -> DataSplits:
    """``splits`` cut to the first ``train.overfit_batches`` global batches, held out too (the same
    batches every epoch), or as they are without it. The batch size must be a number by now:
    ``train.batch_size=auto`` searches on the whole dataset, then the cut follows the size found."""
    if not settings.train.overfit_batches:
        return splits
    per_batch = settings.train.batch_size * settings.train.grad_accum * runtime.dist.world_size
    return splits.first(settings.train.overfit_batches * per_batch)


def build(settings: Config, runtime: Runtime, progress: bool = False,
          splits: Optional[DataSplits] = None) -> TrainingGraph:
    """Every stage of the run ``settings`` describes, on ``runtime``; ``splits``: its dataset stage
    when already built (``build_splits``), so that nothing is read twice."""
    splits = splits if splits is not None else build_splits(settings, runtime, progress)
    return _stages(settings, runtime, splits, settings.data)


def build_probe(settings: Config, runtime: Runtime, splits: DataSplits, batch_size: int) -> TrainingGraph:
    """The run's stages at ``batch_size``, for one probe of the batch-size search: the same model,
    placement, precision, compile, EMA and optimizer as training builds, on this process alone (no
    DDP: the memory of one GPU is what is probed), fed by ``PROBE_LOADER``, with no held-out loader."""
    settings = with_batch_size(settings, batch_size)
    local = Runtime(runtime.device, Dist(), runtime.cache_root, runtime.cores_per_process)
    return _stages(settings, local, splits, PROBE_LOADER, probe=True)


def build_range_test(settings: Config, runtime: Runtime, splits: DataSplits) -> TrainingGraph:
    """The run's stages for optimizer.lr=auto's range test (finders/lr_range.py): the same model, placement
    (a DDP replica on every rank, as training builds it), precision, compile, EMA and optimizer, fed by
    the run's own loader, with no held-out loader; thrown away after the test."""
    return _stages(settings, runtime, splits, settings.data, probe=True)


def build_held_out(settings: Config, runtime: Runtime, splits: DataSplits) -> HeldOut:
    """What evaluating a whole (not sharded) model of ``settings`` on ``splits.val`` takes, from the
    same builders as training. data=default reads every dataset and needs no pack: the metrics do
    not depend on the loader."""
    loader = build_loader(DefaultLoaderConfig(), splits, runtime, eval_batch_size(settings.train), settings.seed,
                          train=False, channels_last=False)
    precision = choice("precision", settings.precision.name).build(settings.precision, runtime.device)
    return HeldOut(loader, build_task(settings.task), precision, runtime.device, runtime.dist,
                   forwards=EvalForwards(settings.train.eval_fold, runtime.device, precision.dtype))


def built_choices(settings: Config, device_type: str) -> Dict[str, Choice]:
    """The choices of the groups built here (``launcher``, ``precision``, ``compile``), each resolved once to
    its registered builder and what it supports; one that cannot run on ``device_type`` is refused. (``data``
    is resolved where its loaders are built: ``build_loader``.)"""
    chosen = {group: choice(group, getattr(settings, group).name) for group in ("launcher", "precision", "compile")}
    for picked in chosen.values():
        picked.refuse_unsupported(device_type=device_type)
    return chosen


def _stages(settings: Config, runtime: Runtime, splits: DataSplits, loader_cfg: LoaderConfig,
            probe: bool = False) -> TrainingGraph:
    """The stages after the dataset, each from its own group's settings (a probe's, for the batch-size
    search or the range test: no held-out loader, no batch recipe, no check of the run's length)."""
    device, train = runtime.device, settings.train
    chosen = built_choices(settings, device.type)
    task = build_task(settings.task)
    if train.target is not None and not probe:
        check_target_run(settings, splits, task)
    launcher = chosen["launcher"]
    if launcher.shards and train.ema_decay is not None:
        raise ConfigError(f"train.ema_decay with launcher={launcher.name}: the average would be a second sharded "
                          f"copy of the model, which fastpipe does not keep; drop train.ema_decay, or use launcher=ddp")
    precision = chosen["precision"].build(settings.precision, device, launcher.shards)
    spec = ModelSpec(settings.model, splits.model_kwargs(), settings.choices.get("model", ""), settings.runtime)
    with setup_part("model_build"):
        parallel = launcher.build(spec, settings.launcher, runtime, precision)
    if settings.compile.optimize_ddp != "auto" and not launcher.ddp:
        warnings.warn(f"compile.optimize_ddp={settings.compile.optimize_ddp} shapes how Dynamo compiles a DDP model; "
                      f"with launcher={settings.launcher.name} it does nothing", FastpipeWarning)
    with setup_part("compile_setup"):
        compiled = build_compiled(settings.compile, chosen["compile"].build, parallel.train_module, device,
                                  units=list(parallel.units) or None)
    ema = build_ema(parallel.model, train.ema_decay)
    factor = lr_factor(train, runtime.dist.world_size)
    optimizer = build_optimizer(settings.optimizer, train, parallel.model, device, factor)
    with setup_part("loader_start"):
        train_loader = build_loader(loader_cfg, splits, runtime, train.batch_size, settings.seed, train=True,
                                    channels_last=parallel.channels_last)
        eval_loader, target_loader, rest_loader = (None, None, None) if probe else held_out_loaders(
            settings, splits, runtime, loader_cfg, parallel.channels_last)
    if not probe and len(train_loader) < train.grad_accum:
        raise ConfigError(f"train.grad_accum={train.grad_accum} exceeds the {len(train_loader)} "
                          "batches of an epoch; lower it or train.batch_size")
    steps = total_steps(train, max(1, len(train_loader) // train.grad_accum))
    schedule = build_schedule(settings.lr_schedule, optimizer, steps, factor)
    images = True if splits.is_images or splits.fact("image_size") else False if splits.fact("vocab_size") else None
    recipe = None if probe else build_batch_recipe(
        train, resize_schedule(getattr(loader_cfg, "resize_schedule", None)), task,
        settings.choices.get("task") or settings.task.short_name, splits.fact("num_classes"), steps, splits.name, images,
        splits.fact("image_size"))
    forwards = None if probe or eval_loader is None else eval_forwards(train, launcher.shards, device, precision,
                                                                        parallel.model, ema)
    return TrainingGraph(runtime, splits, task, parallel, precision, compiled, ema, optimizer, train_loader,
                         eval_loader, schedule, recipe, target_loader, forwards, rest_loader)


def eval_forwards(train: TrainConfig, sharded: bool, device: torch.device, precision: Precision, model: nn.Module,
                  ema) -> EvalForwards:
    """train.eval_fold's forwards, the model and the EMA's average folded now (graph.txt says how); a
    sharded model (its parameters gathered by each forward) is evaluated as it is."""
    forwards = EvalForwards(train.eval_fold, device, None if precision.by_fsdp else precision.dtype)
    if sharded and forwards.why_not is None:
        forwards.why_not = "a sharded model"
    with setup_part("model_build"):  # the evaluation's folded copy of the model
        for module in [model] + ([ema.module] if ema is not None else []):
            forwards.prepare(module)
    return forwards
