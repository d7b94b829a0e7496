"""One training job inside a worker process: runtime -> graph -> loop -> metrics and files."""
from __future__ import annotations

import traceback
from pathlib import Path

from fastpipe import graph as training_graph
from fastpipe.errors import FastpipeError
from fastpipe.loop import train
from fastpipe.measure import StepMeter
from fastpipe.report.run import RunRecorder, empty_metrics, format_summary
from fastpipe.runtime import dist_from_env, environment, setup_runtime


def run_training(settings, run_dir: Path) -> dict:
    """Train per ``settings`` (a Config), write the run folder, return metrics (status ok/failed).

    Exceptions propagate after a failed metrics.json has been written, so the caller can both show
    the reason and exit non-zero.
    """
    dist = dist_from_env()
    recorder = RunRecorder(run_dir, enabled=dist.is_main)
    metrics = empty_metrics(settings.choices, settings.overrides, environment(None, dist.world_size))
    warnings = metrics["warnings"]
    try:
        runtime = setup_runtime(settings)
        metrics["env"] = environment(runtime.device, dist.world_size)
        show = settings.runtime.progress and dist.is_main
        g = training_graph.build(settings, runtime, warnings, progress=show)
        description = g.describe()
        if dist.is_main:
            print(description, flush=True)
        recorder.write_text("graph.txt", description)
        meter = StepMeter(runtime.device, settings.measure.warmup_steps, settings.measure.window,
                          settings.measure.gpu_util_interval_s, world_size=dist.world_size)
        result = train(g, settings.train, meter, recorder, warnings, progress=show)
        measured = meter.summary()
        if measured["throughput"] is None:
            warnings.append(f"only {result.steps} steps ran, none after the {settings.measure.warmup_steps} "
                            "warm-up steps: no steady-state numbers (raise train.max_steps/epochs)")
        metrics.update(measured)
        metrics.update(
            status="ok", steps=result.steps, final_loss=result.final_loss,
            accuracy=None if g.dataset.is_synthetic else result.accuracy, val_loss=result.val_loss,
            nonfinite_steps=result.nonfinite_steps, epoch_times_s=result.epoch_times_s,
            epoch_time_s=result.epoch_times_s[-1] if result.epoch_times_s else None,
            compile_fallback=g.compiled.fallback_reason)
        recorder.plot_loss(result.loss_history, " ".join(f"{k}={v}" for k, v in settings.choices.items()))
        recorder.write_text("graph.txt", g.describe())  # again: a compile fall-back is noted there
    except BaseException as exc:
        metrics["status"] = "failed"
        metrics["reason"] = str(exc) if isinstance(exc, FastpipeError) else _short(exc)
        if not isinstance(exc, FastpipeError):
            metrics["traceback"] = traceback.format_exc()
        raise
    finally:
        recorder.write_metrics(metrics)
        recorder.close()
    if dist.is_main:
        print(format_summary(metrics), flush=True)
    return metrics


def _short(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text}"[:500]

