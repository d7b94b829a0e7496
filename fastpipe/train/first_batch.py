"""Before the first step: a first batch of each split through the project's parts.

A project's dataset, collate_fn, model and task first meet in the training step, where a mismatch
is a torch error far from its cause ("argument 'input' must be Tensor, not tuple", "index out of
range in self") or, for the held-out split, one that comes only after a whole epoch. This check
takes the first ``SAMPLES`` samples of the training and the held-out split, collates them as the
loader does (data/batches.py), prepares them on the device as data=default does, runs the bare
model on them (eval mode, no gradients, the run's autocast), then the task's loss and metrics.

What it recognises ends the run in one line naming the part at fault: samples of different shapes
or a collate_fn's own error (the dataset and split, the collate_fn), what the task cannot train on
(its ``check_batch`` / ``check_output``: task=lm on data that is not token sequences, a tuple where
task=classification takes logits), token ids past the model's vocabulary or sequences past its
``seq_len``, a loss that is not a scalar, a primary metric that ``metrics()`` does not give, and a
held-out split the model cannot run on although it runs on the training split. Anything else the
project's code raises propagates with its traceback. Every rank runs the same check on the same
samples (a sharded model's forwards stay in lockstep).
"""
from __future__ import annotations

import itertools
from typing import Optional

import torch
from torch import nn

from fastpipe.data.batches import NamedCollate
from fastpipe.data.batches import tensors
from fastpipe.data.device import ImagePrep, MovePrep, Normalizer
from fastpipe.data.splits import describe_value
from fastpipe.data.streams import is_stream
from fastpipe.errors import FastpipeError, ProjectError
from fastpipe.runtime import autotuning_off

SAMPLES = 8  # per split: enough to meet samples of different shapes, cheap next to the run


def part(settings, group: str) -> str:
    """How messages name a project part: ``model=gpt_tiny``, or ``model._target_=pkg.Net`` when the
    command line replaced the chosen config's callable."""
    target = getattr(settings, group).target
    replaced = any(o.lstrip("+").startswith(f"{group}._target_=") for o in settings.overrides or [])
    choice = settings.choices.get(group)
    return f"{group}._target_={target}" if replaced or not choice else f"{group}={choice}"


def check_first_batches(g, settings) -> None:
    """Raise ``ProjectError`` for what a first batch of each split shows the run cannot train on (see
    the module docstring); ``g``: the run's TrainingGraph, ``settings``: its Config (for the names)."""
    names = {group: part(settings, group) for group in ("dataset", "model", "task")}
    devices = [g.device.index or 0] if g.device.type == "cuda" else []
    # a random augmentation here leaves the run's streams alone; its 8-sample shapes are not autotuned
    with torch.random.fork_rng(devices=devices), autotuning_off():
        _check(g, names)


def _check(g, names: dict) -> None:
    splits, model = g.dataset, g.model
    train = _first_batch(g, "training", splits.train)
    held = _first_batch(g, "held-out", splits.val) if splits.val is not None else None
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            output = _check_split(g, train, "training", names)
            if held is not None:
                try:
                    held_output = _check_split(g, held, "held-out", names)
                except FastpipeError:  # its own message, or a stop signal that landed here
                    raise
                except Exception as exc:  # the model ran on the training batch: the splits differ
                    raise _splits_differ(exc, train, held, names) from exc
                _check_metrics(g, held, held_output, "held-out", names)
            elif train is not None:
                _check_metrics(g, train, output, "training", names)
    finally:
        model.train(was_training)


def _first_batch(g, split: str, dataset) -> Optional[tuple]:
    """The split's first SAMPLES samples as a batch on the device (None: an empty split)."""
    splits = g.dataset
    if splits.is_synthetic:  # generated on the device: its loader's batch (no held-out split)
        from fastpipe.data.synthetic import SyntheticLoader

        return SyntheticLoader._batch(dataset, SAMPLES, torch.Generator().manual_seed(0), g.device,
                                      g.parallel.channels_last)
    if is_stream(dataset):
        samples, indices = list(itertools.islice(iter(dataset), SAMPLES)), None
    else:
        indices = range(min(SAMPLES, len(dataset)))
        samples = [dataset[i] for i in indices]
    if not samples:
        return None
    batch = NamedCollate(splits.collate_fn, splits.name, split)(samples, indices)
    prepare = ImagePrep(Normalizer(g.device, g.parallel.channels_last)) if splits.is_images else MovePrep(g.device)
    return prepare(batch)


def _check_split(g, batch: Optional[tuple], split: str, names: dict):
    """The model's output on ``batch`` once the task, the vocabulary and the loss accept it."""
    if batch is None:
        return None
    inputs, target = batch
    where = f"{names['dataset']}'s {split} split"
    problem = _ask(g.task, "check_batch", inputs, target)
    if problem:
        raise ProjectError(f"{names['task']} cannot train on {where}: {problem}")
    _check_vocabulary(g, inputs, where, names)
    try:
        with g.precision.autocast():
            output = g.model(inputs)
    except IndexError as exc:  # an embedding looked up past its table
        raise _index_error(g.model, exc, inputs, where, names) or exc
    problem = _ask(g.task, "check_output", output, target)
    if problem:
        raise ProjectError(f"{names['model']} gives what {names['task']} cannot take on {where}: {problem}")
    with g.precision.autocast():
        loss = g.task.loss(output, target)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise ProjectError(f"{names['task']}'s loss(output, target) returns {describe_value(loss)} on {where}, not a "
                           "scalar tensor; return the batch's mean loss (a 0-d tensor)")
    return output


def _ask(task, method: str, *args) -> Optional[str]:
    check = getattr(task, method, None)
    return check(*args) if callable(check) else None


def _largest_id(inputs) -> Optional[int]:
    """The largest integer in the batch's integer tensors (token ids), or None."""
    ids = [int(t.max()) for t in tensors(inputs)
           if t.numel() and not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool]
    return max(ids) if ids else None


def _check_vocabulary(g, inputs, where: str, names: dict) -> None:
    """Token ids and sequence lengths against what a language model declares (``vocab_size``,
    ``seq_len``, as fastpipe's GPT does), before an embedding looks them up."""
    model, model_name = g.model, names["model"]
    vocab, longest = getattr(model, "vocab_size", None), getattr(model, "seq_len", None)
    if isinstance(vocab, int):
        declared = g.dataset.fact("vocab_size")
        top = _largest_id(inputs)
        if isinstance(declared, int) and declared > vocab:
            raise ProjectError(f"{names['dataset']} has a vocabulary of {declared} tokens, but {model_name}'s is "
                               f"{vocab} (model.vocab_size={vocab}); raise model.vocab_size to {declared} or more, or "
                               "leave it unset so that the model takes the dataset's")
        if top is not None and top >= vocab:
            raise ProjectError(f"{where} holds token id {top}, but {model_name}'s vocabulary has {vocab} entries "
                               f"(ids 0..{vocab - 1}); raise model.vocab_size to {top + 1} or more, or leave it unset "
                               "so that the model takes the dataset's vocab_size")
    if isinstance(longest, int) and isinstance(inputs, torch.Tensor) and inputs.dim() == 2 \
            and inputs.shape[1] > longest:
        raise ProjectError(f"{where} gives sequences of {inputs.shape[1]} tokens, but {model_name} covers "
                           f"model.seq_len={longest}; raise model.seq_len to {inputs.shape[1]} or more, or leave it "
                           "unset so that the model takes the dataset's seq_len")


def _index_error(model: nn.Module, exc: IndexError, inputs, where: str, names: dict) -> Optional[ProjectError]:
    """An embedding of the model is smaller than the batch's largest id: which one, and the fix."""
    top = _largest_id(inputs)
    small = [(name, m.num_embeddings) for name, m in model.named_modules()
             if isinstance(m, nn.Embedding) and top is not None and m.num_embeddings <= top]
    if not small:
        return None
    tables = ", ".join(f"{name} has {n}" for name, n in small)
    return ProjectError(f"{names['model']} failed on {where} (IndexError: {exc}): the batch holds id {top}, past the "
                        f"end of its embedding ({tables} entries); give the model a table as large as the data's ids "
                        "(its vocabulary)")


def _check_metrics(g, batch: Optional[tuple], output, split: str, names: dict) -> None:
    """The task's primary metric is among what metrics() (and summarize()) give for this batch."""
    if batch is None:
        return
    task, target = g.task, batch[1]
    with g.precision.autocast():
        sums = task.metrics(output, target)
    if not isinstance(sums, dict):
        raise ProjectError(f"{names['task']}'s metrics(output, target) returns {type(sums).__name__}, not a dict of "
                           "metric name -> the batch's sum")
    given = set(sums)
    summarize = getattr(task, "summarize", None)
    if task.primary not in given and callable(summarize):
        given |= set(summarize({k: float(torch.as_tensor(v).float().sum()) for k, v in sums.items()}) or {})
    if task.primary not in given:
        raise ProjectError(f"{names['task']}'s primary metric {task.primary!r} is not among what its metrics() gives "
                           f"({', '.join(sorted(map(str, given))) or 'nothing'}) on the first batch of "
                           f"{names['dataset']}'s {split} split; return {task.primary!r} from metrics() (a per-batch "
                           "sum), or set primary to one of those names")


def _splits_differ(exc: Exception, train: Optional[tuple], held: tuple, names: dict) -> ProjectError:
    """The model runs on the training batch but not on the held-out one: the two splits' samples differ."""
    seen = describe_value(train[0]) if train is not None else "nothing"
    text = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"
    return ProjectError(f"{names['model']} runs on {names['dataset']}'s training split but fails on its held-out "
                        f"split ({text}): a batch of held-out inputs is {describe_value(held[0])}, of training inputs "
                        f"{seen}; give both splits samples of the same shape (the dataset's 'val' split)")
