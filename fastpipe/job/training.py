"""One training job inside a worker process: runtime -> graph -> loop -> metrics and files."""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch

from fastpipe.train import graph as training_graph
from fastpipe.record import results
from fastpipe.record.run_warnings import collect_warnings
from fastpipe.checkpoint.nothing_to_train import NothingToTrain
from fastpipe.checkpoint.policy import Checkpointer
from fastpipe.checkpoint.state import RunFacts
from fastpipe.config import Config
from fastpipe.errors import FastpipeWarning, TrainingError
from fastpipe.job.graph_text import describe
from fastpipe.train.failures import fixable_failure, record_failure, write_record
from fastpipe.finders import lr_curve, lr_range
from fastpipe.finders.batch_size import find_batch_size
from fastpipe.train.first_batch import check_first_batches
from fastpipe.train.held_out import reads_end_with_the_run
from fastpipe.data.device import reading_ends_with_the_run
from fastpipe.train.loop import train
from fastpipe.measure import setup
from fastpipe.measure.clock import RunClock, cache_counts, compile_cache
from fastpipe.measure.steps import StepMeter, combine_ranks
from fastpipe.stages.profiling import build_profiler
from fastpipe.record.recorder import RunRecorder
from fastpipe.record.run_record import RunRecord
from fastpipe.record.summary import summary_text
from fastpipe.machine import environment
from fastpipe.runtime import dist_from_env, process_state_kept, setup_runtime
from fastpipe.signals import deferred, stop_on_signals, stopped_before_training, training


def run_training(settings: Config, run_dir: Path) -> dict:
    """Train per ``settings`` (a Config), write the run folder, return metrics.json's content (status ok).

    Exceptions propagate after a failed metrics.json has been written, so the caller can both show
    the reason and exit non-zero.
    """
    with process_state_kept():  # what the run sets process-wide (runtime.py) is put back as it ends
        return _run_training(settings, run_dir)


def _run_training(settings: Config, run_dir: Path) -> dict:
    # SIGTERM/SIGUSR1/SIGUSR2 at any moment, from the run's first line to its record: exit 75 (checkpointed once
    # training); a stop signal while the record is written is acted on once it is written
    with stop_on_signals():
        return _record_the_run(settings, run_dir)


def _record_the_run(settings: Config, run_dir: Path) -> dict:
    parts = setup.SetupParts(settings.started_at)  # the trainer's first line: what came before is imports
    dist = dist_from_env()
    recorder = RunRecorder.for_run(settings, run_dir, dist)  # its loggers start now, off this thread
    record = RunRecord.start(settings.choices, settings.overrides, environment(None, dist.world_size), settings.run_id)
    record.set(name=settings.name, tags=list(settings.tags), code=settings.context.code)
    record.warnings.extend(settings.notes)  # keys dropped for this choice: printed once, with the summary's warnings
    clock = RunClock(settings.started_at, settings.train.time_budget_s)  # from the job's start
    ckpt = Checkpointer(settings.train, run_dir, dist, RunFacts.of(settings), clock=clock,
                        on_written=recorder.checkpoint)
    try:  # each FastpipeWarning is recorded
        with collect_warnings(record.warnings), setup.active(parts):
            _train_and_record(settings, run_dir, dist, recorder, record, ckpt)
            return record.to_dict()
    except NothingToTrain as exc:  # a resume at the run's end: said in one line, not a failure
        earlier = results.before(run_dir, settings.run_id)
        if exc.keeps(earlier):  # the run stopped itself there: its finished record stays, as this launch's
            record = RunRecord.from_dict({**earlier, "run_id": settings.run_id})
        else:
            record.set(**{**exc.metrics, "reason": str(exc), "checkpoint": str(ckpt.latest)})
        if dist.is_main:
            print(f"fastpipe: {exc}", file=sys.stderr, flush=True)
        return record.to_dict()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt) and record.status == "ok":  # Ctrl-C once the results were in
            record.warnings.append("interrupted (Ctrl-C) after the results were written; they are kept")
            raise
        # a stop signal before training began wins over the error it became where it landed
        failure = (None if isinstance(exc, KeyboardInterrupt) else stopped_before_training()) or \
            fixable_failure(settings, exc, run_dir)
        record_failure(failure, record, ckpt)
        if failure is not exc:
            raise failure from exc
        raise
    finally:
        if record.setup_parts_s is None:  # a run that failed after its first step (a kept record keeps its own)
            record.setup_parts_s = parts.record(ckpt.clock.setup_s)
        with deferred():  # written whole, then a stop signal that came meanwhile is acted on
            write_record(recorder, record, run_dir)  # metrics.json, then the loggers' ends


def _train_and_record(settings: Config, run_dir: Path, dist, recorder, record: RunRecord, ckpt: Checkpointer) -> None:
    """Build, train, measure; fill ``record`` (written by the caller, whatever happens)."""
    runtime = setup_runtime(settings)
    record.env = environment(runtime.device, dist.world_size)
    show = settings.runtime.progress and dist.is_main
    settings, splits, search, lr_search = _searched(settings, runtime, record, recorder, show)
    if settings.train.lr_find_only:  # the range test is this job's result (a race's shared one): no training
        record.set(status="ok", batch_size=settings.train.batch_size)
        if dist.is_main:
            print(f"fastpipe: train.lr_find_only: the range test's suggestion {lr_search.suggestion:.3g} is in "
                  f"{run_dir / 'metrics.json'} (lr_search); nothing trained", flush=True)
        return
    g = training_graph.build(settings, runtime, progress=show, splits=splits)
    record.set(model_build_s=round(g.parallel.build_s, 3),
               fp8=g.precision.fp8.record() if g.precision.fp8 is not None else None)
    # a failed run's DataLoader workers stop at once (data/device.py, close)
    with reading_ends_with_the_run(g.train_loader, g.eval_loader, g.target_loader, g.rest_loader):
        if not settings.train.resume and hasattr(g.train_loader, "start_early"):
            with setup.setup_part("loader_start"):  # its workers start and read ahead while the rest sets up
                g.train_loader.start_early(0)
        with setup.setup_part("first_batch_check"):  # the project's parts on a first batch of each split
            check_first_batches(g, settings)
        description = describe(g, settings, search, lr_search)
        if dist.is_main:
            print(description, flush=True)
        recorder.write_text("graph.txt", description)
        meter = StepMeter(runtime.device, settings.measure.warmup_steps, settings.measure.window,
                          settings.measure.gpu_util_interval_s, world_size=dist.world_size, run_clock=ckpt.clock)
        profile = build_profiler(getattr(settings, "profile", None), run_dir, runtime.device, dist.is_main)
        setup.close()  # what is timed from here on is training's (a resume's checkpoint load: set-up's other)
        # a stop signal from here on: checkpoint at the next step boundary
        with training(), profile as profiler, reads_end_with_the_run(g.target_held_out, g.held_out):
            result = train(g, settings.train, meter, recorder, show, ckpt=ckpt, profiler=profiler)
    measured = combine_ranks(dist.gather(meter.summary()))  # job-level: throughput summed over ranks
    if measured["throughput"] is None:
        warnings.warn(f"only {result.steps} steps ran, none after the {settings.measure.warmup_steps} "
                      "warm-up steps: no steady-state numbers (raise train.max_steps/epochs)", FastpipeWarning)
    record.set(**measured)
    record.set(**outcome(g, result))
    primary = record.primary_metric
    # written in the background while the FLOPs are counted; complete before the record says ok
    last = ckpt.save_weights(g, "last", result.steps, g.ema, primary and {primary["name"]: primary["value"]})
    record.set(**model_flops(g, result, measured["throughput"], dist.world_size))
    record.compile_cache = compile_cache(dist.gather(cache_counts()), settings.compile.name != "off")
    ckpt.settle(g=g)
    record.set(checkpoint=ckpt.latest and str(ckpt.latest), weights_file=last and str(last),
               checkpoint_stall_s=ckpt.stall_summary())
    _require_primary(g, result, settings)  # a held-out split without its primary metric is no result
    record.set(status="ok")
    recorder.plot_loss(result.loss_history, record)
    recorder.write_text("graph.txt", describe(g, settings, search, lr_search))  # again: a compile fall-back is noted there
    record.time_breakdown_s = ckpt.clock.breakdown()  # last: the job's wall time up to its record
    record.setup_parts_s = setup.recorded(ckpt.clock.setup_s)
    summary = summary_text(record)
    recorder.write_text("summary.txt", summary)  # beside graph.txt: the summary outlives the terminal
    if dist.is_main:
        print(summary, flush=True)


def _searched(settings: Config, runtime, record: RunRecord, recorder, show: bool) -> tuple:
    """The dataset stage built once, then what ``auto`` leaves to a search, each noted in ``record``:
    ``train.batch_size`` on the whole dataset (``train.overfit_batches`` cuts it at the size found),
    then ``optimizer.lr`` at that batch on the run's own splits. (settings as found, splits, the batch
    search, the range test); a search not run is None."""
    splits, search = training_graph.build_splits(settings, runtime, progress=show, cut=False), None
    if settings.train.batch_size == "auto":  # first the batch, then the rate at that batch
        with setup.setup_part("batch_search"):
            settings, search = _with_found_batch_size(settings, runtime, splits)
        record.batch_size_search = search.record()
    record.batch_size = settings.train.batch_size
    splits = training_graph.overfit_cut(settings, runtime, splits)
    try:
        with setup.setup_part("lr_search"):
            settings, lr_search = lr_range.settle(settings, runtime, splits)  # optimizer.lr=auto
    except lr_range.UnreadableCurve as refused:  # the curve that was refused, for the user to look at
        if recorder.enabled:
            curve = refused.curve
            lr_curve.write_csv(recorder.run_dir / lr_curve.CSV, {"curve": list(zip(curve.lrs, curve.losses))}, curve.raw)
        raise
    if lr_search is not None:
        record.lr_search = lr_search.record()
        lr_curve.write(recorder, record.lr_search, lr_search.raw or None)
    return settings, splits, search, lr_search


def _with_found_batch_size(settings: Config, runtime, splits) -> tuple:
    """``settings`` with ``train.batch_size=auto`` replaced by the size the search found on ``splits``,
    and the search."""
    # optimizer.lr=auto: any rate sizes the step, so the probes train at the ramp's first
    search = find_batch_size(lr_range.provisional(settings), runtime, splits)
    if runtime.dist.is_main:
        print(f"fastpipe: train.batch_size=auto: {search.chosen} per process {search.describe()}", file=sys.stderr,
              flush=True)
    return training_graph.with_batch_size(settings, search.chosen), search


def _require_primary(g, result, settings: Config) -> None:
    """A run evaluated on a held-out split must end with a finite primary metric: without one, the
    run's parity, target and rank in a sweep mean nothing. Runs without a held-out split (dataset=
    synthetic) report a null metric and stay ok."""
    import math

    val, name = result.val_metrics, g.task.primary
    if g.eval_loader is None or val is None:
        return
    from fastpipe.train.first_batch import part

    task = part(settings, "task")
    if name not in val:
        raise TrainingError(f"{task}'s primary metric {name!r} is missing from the held-out metrics "
                            f"({', '.join(sorted(val)) or 'none'}) after step {result.steps}: the run has no result; "
                            f"return {name!r} from metrics() on every batch, or set primary to one of those names")
    value = val[name]
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TrainingError(f"{task}'s primary metric {name} is {value} on the held-out split after step "
                            f"{result.steps}: the run has no result; the model's outputs or metrics()' sums are "
                            "non-finite (look at final_loss and val_metrics: lower optimizer.lr, or use "
                            "precision=fp32 to rule out overflow, or fix metrics())")


def outcome(g, result) -> dict:
    """What the run achieved: the task's held-out metrics, the primary one, the training loss."""
    val = result.val_metrics
    primary = None if val is None or g.task.primary not in val else {
        "name": g.task.primary, "value": val[g.task.primary], "higher_is_better": g.task.higher_is_better}
    record = {"steps": result.steps, "final_loss": result.final_loss, "val_metrics": val, "primary_metric": primary,
              "accuracy": (val or {}).get("accuracy"), "val_loss": (val or {}).get("loss"),
              "weights": "ema" if g.ema is not None else "raw",
              "val_metrics_raw": result.val_metrics_raw if g.ema is not None else None,
              "best": result.best and {"step": result.best["step"], "value": result.best["value"]},
              "stopped_early": result.stopped_early, "stopped_by": result.stopped_by, "target": result.target,
              "grad_norm": result.grad_norm,
              "task": type(g.task).__name__, "nonfinite_steps": result.nonfinite_steps,
              "epoch_times_s": result.epoch_times_s,
              "epoch_time_s": result.epoch_times_s[-1] if result.epoch_times_s else None,
              "compile_fallback": g.compiled.fallback_reason, "corpus_baselines": g.dataset.fact("corpus_baselines")}
    return record


def model_flops(g, result, throughput, world_size: int) -> dict:
    """FLOPs per sample, MFU against the device's table peak, and tokens/s for language modelling."""
    from fastpipe.measure import flops

    per_sample, method = (flops.training_flops_per_sample(g.model, result.sample_inputs, 2)
                          if result.sample_inputs is not None else (None, None))
    name = torch.cuda.get_device_name(g.device) if g.device.type == "cuda" else ""
    peak = flops.peak_tflops(name, flops.precision_kind(g.precision)) if name else None
    tokens = throughput * result.tokens_per_sample if throughput and result.tokens_per_sample else None
    return {"flops_per_sample": per_sample, "flops_method": method, "peak_tflops": peak,
            "mfu": flops.utilisation(per_sample, throughput, peak, world_size), "tokens_per_s": tokens}
