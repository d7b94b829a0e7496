"""A run's record, metrics.json: its keys, the one constructor of a failed record, atomic write, read.

Every process that records a run (the trainer, the launcher after a crash, the entry point after bad
input, the repeat executor) goes through this module, so a failed run always has a complete record.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Dict, Iterable, Optional

FILE = "metrics.json"
# What each version of the record changed is in docs/measuring.md ("schema versions").
SCHEMA_VERSION = 3
PREVIOUS = "metrics.previous.json"  # an earlier run's record in a reused folder

KEYS = ("schema_version", "status", "reason", "run_id", "choices", "overrides", "task", "throughput", "tokens_per_s", "step_time_ms",
        "epoch_time_s", "epoch_times_s", "warmup_s", "data_wait_frac", "peak_mem_gb", "peak_mem_kind",
        "gpu_util", "final_loss", "val_metrics", "primary_metric", "accuracy", "val_loss", "corpus_baselines",
        "nonfinite_steps", "steps", "measured_steps", "compile_fallback", "flops_per_sample", "flops_method",
        "peak_tflops", "mfu", "checkpoint", "checkpoint_stall_s", "weights", "weights_file", "val_metrics_raw", "best", "stopped_early",
        "stopped_by", "target", "time_breakdown_s", "compile_cache", "grad_norm", "batch_size", "batch_size_search", "per_rank", "env", "warnings")


def new_record(choices: Dict[str, str], overrides: Iterable[str], env: Optional[dict] = None,
               run_id: Optional[str] = None) -> dict:
    """Every documented key, null until measured; status ``failed`` until the run says otherwise."""
    record = {key: None for key in KEYS}
    record.update(schema_version=SCHEMA_VERSION, status="failed", choices=dict(choices or {}),
                  overrides=list(overrides or []), env=env, warnings=[], run_id=run_id)
    return record


def failed(reason: str, choices: Dict[str, str], overrides: Iterable[str], env: Optional[dict] = None,
           traceback: Optional[str] = None, run_id: Optional[str] = None, **extra) -> dict:
    """The record of a run that failed (or stopped) for ``reason``; ``extra`` keys are merged in."""
    record = new_record(choices, overrides, env, run_id)
    record["reason"] = reason
    if traceback:
        record["traceback"] = traceback
    record.update(extra)
    return record


def _finite_or_none(value):
    """JSON has no NaN/inf: a non-finite measurement is recorded as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_none(v) for v in value]
    return value


def write_json_atomic(path: Path, payload: dict) -> None:
    """Write via a temporary file, fsync and rename, so a reader never sees half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as fh:
        json.dump(_finite_or_none(payload), fh, indent=2, default=str, allow_nan=False)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write(run_dir: Path, record: dict) -> None:
    """Write ``record`` as the run folder's metrics.json."""
    write_json_atomic(Path(run_dir) / FILE, record)


def begin(run_dir: Path, choices: Dict[str, str], overrides: Iterable[str], run_id: str) -> None:
    """A run starts in ``run_dir``: an earlier run's record moves to ``metrics.previous.json`` (kept,
    never reported as this run's), and a ``running`` record of this run takes its place."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    old = run_dir / FILE
    if old.exists():
        os.replace(old, run_dir / PREVIOUS)
    write(run_dir, failed("the run did not finish: its process died or is still running", choices, overrides,
                          run_id=run_id, status="running"))


def own(run_dir: Path, run_id: Optional[str]) -> Optional[dict]:
    """The run folder's record if this run (``run_id``) wrote it, else None."""
    record = read(run_dir)
    return record if record is not None and record.get("run_id") == run_id else None


def read(run_dir: Path) -> Optional[dict]:
    """The run folder's record, or None when it has none (or an unreadable one)."""
    try:
        return json.loads((Path(run_dir) / FILE).read_text())
    except (OSError, ValueError):
        return None


def _fmt(value, spec: str, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def held_out_text(m: dict, key: str = "val_metrics") -> str:
    """``accuracy 99.50 % (primary)  loss 0.0213``: the held-out metrics in one line."""
    values = m.get(key)
    if not values:
        return "n/a (no held-out split)"
    primary = (m.get("primary_metric") or {}).get("name")
    parts = [f"{k} {100 * v:.2f} %" if k == "accuracy" else f"{k} {v:.4g}" for k, v in values.items()]
    return "  ".join(p + (" (primary)" if k == primary else "") for p, k in zip(parts, values))


def target_text(t: dict) -> str:
    """``accuracy >= 0.95 reached at step 240 in 63.6 s (70.1 s end to end), 15,360 samples``, or not."""
    sign = ">=" if t.get("higher_is_better", True) else "<="
    if t.get("reached"):
        return (f"{t['metric']} {sign} {t['value']:g} reached at step {t['steps']} in {t['seconds']:.2f} s of training "
                f"({t['seconds_end_to_end']:.2f} s end to end), {t['samples']:,} samples: {t['reached_value']:.4g}")
    best = "n/a" if t.get("best_value") is None else f"{t['best_value']:.4g}"
    return f"{t['metric']} {sign} {t['value']:g} NOT reached in {t['seconds']:.2f} s ({t['steps']} steps): best {best}"


def summary_text(m: dict) -> str:
    """The few lines printed at the end of a run."""
    if m.get("status") != "ok":
        return f"fastpipe run FAILED: {m.get('reason')}"
    st = m.get("step_time_ms") or {}
    tokens = f"  ({m['tokens_per_s']:,.0f} tokens/s)" if m.get("tokens_per_s") else ""
    lines = [
        "fastpipe run summary",
        f"  throughput   {_fmt(m['throughput'], ',.1f')} samples/s{tokens} (steady state, {m['measured_steps']} steps)",
        f"  step time    median {_fmt(st.get('median'), '.2f', ' ms')}  p90 {_fmt(st.get('p90'), '.2f', ' ms')}",
        f"  warm-up      {_fmt(m['warmup_s'], '.2f', ' s')} (compilation included)   epoch {_fmt(m['epoch_time_s'], '.2f', ' s')}",
        f"  data-wait    {_fmt(None if m['data_wait_frac'] is None else 100 * m['data_wait_frac'], '.1f', ' %')}"
        f"   GPU util {_fmt(m['gpu_util'], '.0f', ' %')}   peak memory {_fmt(m['peak_mem_gb'], '.3f', ' GB')}",
        f"  held-out     {held_out_text(m)}   final loss {_fmt(m['final_loss'], '.4f')}",
    ]
    if m.get("weights") == "ema":
        lines.append(f"  weights      the EMA's (train.ema_decay); the raw weights: {held_out_text(m, 'val_metrics_raw')}")
    if m.get("best"):
        best = m["best"]
        lines.append(f"  best         step {best['step']}: {(m.get('primary_metric') or {}).get('name')} {best['value']:.4g}"
                     + ("   (stopped early: no gain for train.early_stop_patience evaluations)" if m.get("stopped_early")
                        else ""))
    if m.get("target"):
        lines.append(f"  target       {target_text(m['target'])}")
    if m.get("time_breakdown_s"):
        t = m["time_breakdown_s"]
        lines.append(f"  time         {t['wall_s']:.2f} s wall: " + "  ".join(f"{k} {t[k]:.2f}" for k in
                                                                           ("setup", "compile", "train", "eval",
                                                                            "checkpoint"))
                     + (f"   compile cache {m['compile_cache']['state']}" if m.get("compile_cache") else ""))
    if m.get("stopped_by") == "time_budget":
        lines.append("  stopped      train.time_budget_s: the training clock ran out (checkpointed; resume to go on)")
    if m.get("corpus_baselines"):
        b = m["corpus_baselines"]
        lines.append(f"  baselines    corpus entropy per token: bigram {b['bigram']:.3f}  unigram {b['unigram']:.3f}  "
                     f"uniform {b['uniform']:.3f} nats")
    if m.get("flops_per_sample"):
        mfu = m.get("mfu")
        flops = m["flops_per_sample"]
        amount = f"{flops / 1e9:.3f} GFLOP" if flops >= 1e8 else f"{flops / 1e6:.3f} MFLOP"
        lines.append(f"  model FLOPs  {amount}/sample (fwd+bwd)   MFU "
                     + (f"{100 * mfu:.1f} % of {m['peak_tflops']:.0f} TFLOP/s" if mfu is not None else "n/a (no peak for this device)"))
    lines += [f"  warning      {w}" for w in m.get("warnings") or []]
    return "\n".join(lines)
