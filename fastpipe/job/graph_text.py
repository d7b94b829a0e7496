"""graph.txt: the training graph as printed, one numbered line per stage, each line its stage's own
description (written beside the stage's builder); assembled again after training, when a compile
fall-back has changed the compile line."""
from __future__ import annotations

from typing import List, Optional, Tuple

from fastpipe.config import Config
from fastpipe.measure.steps import describe_measurement
from fastpipe.models import describe_model
from fastpipe.stages.optim import describe_optimization
from fastpipe.stages.tasks import describe_task
from fastpipe.finders.batch_size import BatchSearch
from fastpipe.train.graph import TrainingGraph, steps_per_epoch
from fastpipe.train.held_out import eval_batch_size, reads_ahead
from fastpipe.train.loop import describe_loop
from fastpipe.finders.lr_range import LrSearch


def stage_lines(g: TrainingGraph, settings: Config, search: Optional[BatchSearch] = None,
                lr_search: Optional[LrSearch] = None) -> List[Tuple[str, str]]:
    """(stage, description) in the graph's order; ``search``: how train.batch_size=auto chose the size,
    ``lr_search``: how optimizer.lr=auto found the rate."""
    train, world = settings.train, g.runtime.dist.world_size
    optimizer = describe_optimization(g.optimizer, train, world, g.schedule.configured)
    per_epoch = steps_per_epoch(g, train)
    return [
        ("runtime", g.runtime.describe(settings.seed, settings.runtime.cudnn_benchmark, g.parallel.channels_last)),
        ("dataset", g.dataset.describe()),
        ("loader", f"data={g.train_loader.describe()}  batch_size={train.batch_size}/process"
                   + (f" {search.describe()}" if search is not None else "")
                   + (f"  eval_batch_size={eval_batch_size(train)}" if g.eval_loader is not None else "")
                   + ("  held-out batches read ahead to the device" if reads_ahead(train.eval_read_ahead, g.held_out)
                      else "")),
        ("task", describe_task(g.task)),
        ("model", f"{describe_model(settings.model, g.model)}  built on {g.parallel.built_on} in "
                  f"{g.parallel.build_s:.1f} s"),
        ("parallel", g.parallel.describe()),
        ("precision", g.precision.describe()),
        ("compile", g.compiled.describe()),
        ("optimizer", lr_search.annotate(optimizer) if lr_search is not None else optimizer),
        ("schedule", g.schedule.describe() + (f"  {g.ema.describe()}" if g.ema is not None else "")),
        ("loop", describe_loop(train, per_epoch, g.dataset.val,
                               f"{g.task.primary} {'>=' if g.task.higher_is_better else '<='}")
                 + (f"  {g.eval_forwards.describe()}" if g.eval_forwards and g.eval_forwards.describe() else "")),
        *([("batches", g.batch_recipe.describe())] if g.batch_recipe is not None else []),
        ("measure", describe_measurement(settings.measure.warmup_steps, settings.measure.window)),
    ]


def describe(g: TrainingGraph, settings: Config, search: Optional[BatchSearch] = None,
             lr_search: Optional[LrSearch] = None) -> str:
    """graph.txt's text."""
    lines = ["fastpipe training graph"]
    lines += [f"  {i + 1:>2}. {name:<10} {text}"
              for i, (name, text) in enumerate(stage_lines(g, settings, search, lr_search))]
    return "\n".join(lines)
