"""How one sweep job is measured: ``report.repeats`` launches, or skipped under ``sweep.resume``.

With ``report.repeats=N`` (N > 1) the job trains N times, each in its own fresh process and
sub-folder ``repeat-K/`` (a complete run folder), and the job's own ``metrics.json`` holds the
median of every measurement plus a ``repeats`` record (each repeat's throughput, min, max, spread).
"""
from __future__ import annotations

import copy
import dataclasses
import statistics
from pathlib import Path
from typing import Callable, List, Optional

from fastpipe.record import results
from fastpipe.record.run_record import RunRecord
from fastpipe.record.overrides import measured_overrides

# Measurements summarised by their median over the repeats.
MEDIAN_KEYS = ("throughput", "epoch_time_s", "warmup_s", "data_wait_frac", "gpu_util", "accuracy",
               "final_loss", "val_loss")


def finished_metrics(run_dir: Path, overrides) -> Optional[dict]:
    """The job's metrics if ``run_dir`` already holds an ok run of the same overrides, else None.

    Comparing the overrides guards against a changed command line, where Hydra's job numbers (and
    so the folders) would point at different combinations.
    """
    metrics = results.read(run_dir)
    if not metrics or metrics.get("status") != "ok":
        return None
    if measured_overrides(metrics.get("overrides")) != measured_overrides(overrides):
        return None
    return metrics


def launch_repeats(launch: Callable, settings, run_dir: Path) -> dict:
    """Run ``launch(settings, dir)`` ``settings.report.repeats`` times; return the combined metrics."""
    run_dir = Path(run_dir)
    n = settings.report.repeats
    if n == 1:
        return launch(settings, run_dir)
    runs, names = [], []
    for k in range(n):
        names.append(f"repeat-{k}")
        repeat = copy.copy(settings)  # each repeat is its own launch, and its trackers' own run
        if getattr(settings, "context", None) is not None:
            repeat.context = dataclasses.replace(settings.context, repeat=k)
        runs.append(launch(repeat, run_dir / names[-1]))
        if runs[-1].get("status") != "ok":
            break  # a failed repeat (bad input, crash) would fail again: stop measuring
    combined = _combined(runs, names, n)
    results.write(run_dir, combined)
    return combined.to_dict()


def combine_repeats(runs: List[dict], names: List[str], n: int) -> dict:
    """One metrics dict for N repeats: medians, the max peak memory, and a ``repeats`` record."""
    return _combined(runs, names, n).to_dict()


def _combined(runs: List[dict], names: List[str], n: int) -> RunRecord:
    throughputs = [m.get("throughput") for m in runs]
    repeats = {"n": n, "dirs": names, "throughput": throughputs, "min": None, "max": None, "spread": None}
    failed = next((i for i, m in enumerate(runs) if m.get("status") != "ok"), None)
    if failed is not None:  # the job's record is the failed repeat's, its reason naming the repeat
        record = RunRecord.from_dict(runs[failed])
        return record.fail(f"repeat {failed + 1} of {n}: {record.reason}", record.status, repeats=repeats)
    measured = [t for t in throughputs if t is not None]
    centre = statistics.median(measured) if measured else None
    # The representative repeat (closest to the median) supplies step times, steps and env.
    rep = min(range(len(runs)), key=lambda i: abs((throughputs[i] or 0.0) - (centre or 0.0)))
    record = RunRecord.from_dict(runs[rep])
    for key in MEDIAN_KEYS:
        values = [m[key] for m in runs if m.get(key) is not None]
        record.set(**{key: statistics.median(values) if values else None})
    peaks = [m["peak_mem_gb"] for m in runs if m.get("peak_mem_gb") is not None]
    record.peak_mem_gb = max(peaks) if peaks else None
    record.warnings = list(dict.fromkeys(w for m in runs for w in m.get("warnings") or []))
    record.compile_fallback = next((m["compile_fallback"] for m in runs if m.get("compile_fallback")), None)
    if measured:
        repeats.update(min=min(measured), max=max(measured), spread=(max(measured) - min(measured)) / centre)
    record.repeats = repeats
    return record
