"""How one sweep job is measured: ``report.repeats`` launches, or skipped under ``sweep.resume``
(a job, or each repeat of one, that finished ok is kept; one stopped by a signal continues).

With ``report.repeats=N`` (N > 1) the job trains N times, each in its own fresh process and
sub-folder ``repeat-K/`` (a complete run folder), and the job's own ``metrics.json`` holds the
median of every measurement (each held-out metric, the primary one included; ``best`` is the median
repeat's) plus a ``repeats`` record (each repeat's throughput, min, max, spread).
Under ``report.objective=time_to_target`` repeat K trains with ``seed + K`` (time to a target depends
on the seed; throughput does not), and ``target`` holds the median time over the repeats, a repeat
that missed the target counting as slower than every one that reached it.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import statistics
import time
from pathlib import Path
from typing import Callable, List, Optional

from fastpipe.record import results
from fastpipe.record.run_record import RunRecord
from fastpipe.record.overrides import measured_overrides

# Measurements summarised by their median over the repeats.
MEDIAN_KEYS = ("throughput", "epoch_time_s", "warmup_s", "data_wait_frac", "host_frac", "gpu_util", "accuracy",
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


def launch_repeats(launch: Callable, settings, run_dir: Path, resume: bool = False) -> dict:
    """Run ``launch(settings, dir)`` ``settings.report.repeats`` times; return the combined metrics.

    ``resume`` (``sweep.resume`` in a sweep): a repeat folder that holds an ok run of the job's
    overrides is kept as it is, and one stopped with a checkpoint (a stop signal) continues from it.
    """
    run_dir = Path(run_dir)
    n = settings.report.repeats
    if n == 1:
        return launch(resumable(settings, run_dir, resume), run_dir)
    runs, names = [], []
    for k in range(n):
        names.append(f"repeat-{k}")
        folder = run_dir / names[-1]
        kept = finished_metrics(folder, settings.overrides) if resume else None
        if kept is not None:
            print(f"fastpipe: sweep.resume: {folder} finished ok earlier; kept", flush=True)
            runs.append(kept)
        else:
            runs.append(launch(resumable(repeat_settings(settings, k), folder, resume), folder))
        if runs[-1].get("status") != "ok":
            break  # a failed repeat (bad input, crash) would fail again: stop measuring
    combined = combined_record(runs, names, n)
    results.write(run_dir, combined)
    return combined.to_dict()


def resumable(settings, run_dir: Path, resume: bool):
    """``settings`` for a launch into ``run_dir``: under ``resume`` a folder with checkpoints (a run
    stopped by a signal) continues from its newest good one (``train.resume=auto``), unless the
    command names its own ``train.resume``."""
    if not resume or settings.train.resume is not None or not (Path(run_dir) / "checkpoints").is_dir():
        return settings
    resumed = copy.copy(settings)
    resumed.train = copy.copy(settings.train)  # this launch's own: the job's other repeats keep theirs
    resumed.train.resume = "auto"
    return resumed


def repeat_settings(settings, k: int):
    """Repeat ``k``'s settings: the job's own, each repeat its own launch and its trackers' own run, with
    ``seed + k`` under time_to_target (and its own start)."""
    repeat = copy.copy(settings)
    if getattr(settings, "context", None) is not None:
        repeat.context = dataclasses.replace(settings.context, repeat=k)
    if k > 0 and getattr(settings.report, "objective", "throughput") == "time_to_target":
        repeat.seed, repeat.started_at = settings.seed + k, time.time()
    return repeat


def _median_time(targets: List[dict], key: str) -> Optional[float]:
    """The median of ``key`` over the repeats, a repeat that missed the target counting as infinitely
    slow; None when the median is such a repeat."""
    values = sorted(t[key] if t["reached"] else math.inf for t in targets)
    middle = len(values) // 2
    centre = values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2
    return None if math.isinf(centre) else centre


def combine_targets(targets: List[Optional[dict]]) -> Optional[dict]:
    """One ``target`` record for the repeats (module docstring): ``reached`` when the median repeat
    reached it, ``seconds`` / ``seconds_end_to_end`` the medians, the steps and values of the repeat
    closest to the median, and ``repeats``: each one's seconds and reached, and the min/max of those
    that reached (the spread)."""
    known = [t for t in targets if t]
    if not known:
        return None
    seconds = _median_time(known, "seconds")
    reached = [t["seconds"] for t in known if t["reached"]]
    if seconds is None:  # most missed it: not reached, its clock and best value the medians over the runs
        combined = dict(next(t for t in known if not t["reached"]), reached=False)
        for key in ("seconds", "seconds_end_to_end", "best_value"):  # each one's median over the runs that have it
            values = [t[key] for t in known if t.get(key) is not None]
            combined[key] = statistics.median(values) if values else None
    else:
        combined = dict(min((t for t in known if t["reached"]), key=lambda t: abs(t["seconds"] - seconds)))
        combined.update(seconds=seconds, seconds_end_to_end=_median_time(known, "seconds_end_to_end"))
    combined["repeats"] = {"seconds": [t["seconds"] for t in known],
                           "seconds_end_to_end": [t["seconds_end_to_end"] for t in known],
                           "reached": [t["reached"] for t in known],
                           "min": min(reached) if reached else None, "max": max(reached) if reached else None}
    return combined


def combine_repeats(runs: List[dict], names: List[str], n: int) -> dict:
    """One metrics dict for N repeats: medians, the max peak memory, and a ``repeats`` record."""
    return combined_record(runs, names, n).to_dict()


def _median_dict(dicts: List[Optional[dict]]) -> Optional[dict]:
    """Key by key, the median over the dicts that have the key (None when no dict is given)."""
    known = [d for d in dicts if d]
    if not known:
        return None
    keys = dict.fromkeys(k for d in known for k in d)
    out = {}
    for k in keys:
        values = [d[k] for d in known if isinstance(d.get(k), (int, float)) and not isinstance(d.get(k), bool)]
        out[k] = statistics.median(values) if values else known[0].get(k)
    return out


def combined_record(runs: List[dict], names: List[str], n: int, raced: bool = False) -> RunRecord:
    """One RunRecord for N runs of one job (repeats, or a race's rounds: ``raced``): medians, the max peak
    memory, a ``repeats`` record; a failed run's record when one failed, its reason naming that run."""
    throughputs = [m.get("throughput") for m in runs]
    repeats = {"n": n, "dirs": names, "throughput": throughputs, "min": None, "max": None, "spread": None}
    failed = next((i for i, m in enumerate(runs) if m.get("status") != "ok"), None)
    if failed is not None:  # the job's record is the failed repeat's, its reason naming the repeat
        record = RunRecord.from_dict(runs[failed])
        which = f"in {names[failed]}/" if raced else f"repeat {failed + 1} of {n}"  # a race's round-K folder
        return record.fail(f"{which}: {record.reason}", record.status, repeats=repeats)
    measured = [t for t in throughputs if t is not None]
    centre = statistics.median(measured) if measured else None
    # The representative repeat (closest to the median) supplies step times, steps and env.
    rep = min(range(len(runs)), key=lambda i: abs((throughputs[i] or 0.0) - (centre or 0.0)))
    record = RunRecord.from_dict(runs[rep])
    for key in MEDIAN_KEYS:
        values = [m[key] for m in runs if m.get(key) is not None]
        record.set(**{key: statistics.median(values) if values else None})
    for key in ("val_metrics", "val_metrics_raw"):  # each held-out metric its median over the repeats
        record.set(**{key: _median_dict([m.get(key) for m in runs])})
    primary = record.primary_metric
    if primary is not None:
        values = [(m.get("primary_metric") or {}).get("value") for m in runs]
        values = [v for v in values if v is not None]
        record.primary_metric = dict(primary, value=statistics.median(values) if values else None)
    bests = sorted((m["best"] for m in runs if m.get("best")), key=lambda b: b["value"])
    record.best = bests[(len(bests) - 1) // 2] if bests else None  # the median repeat's best (its step with it)
    peaks = [m["peak_mem_gb"] for m in runs if m.get("peak_mem_gb") is not None]
    record.peak_mem_gb = max(peaks) if peaks else None
    record.warnings = list(dict.fromkeys(w for m in runs for w in m.get("warnings") or []))
    record.compile_fallback = next((m["compile_fallback"] for m in runs if m.get("compile_fallback")), None)
    record.target = combine_targets([m.get("target") for m in runs])
    if measured:
        repeats.update(min=min(measured), max=max(measured), spread=(max(measured) - min(measured)) / centre)
    record.repeats = repeats
    return record
