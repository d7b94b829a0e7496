"""The few lines printed at the end of a run, from its record."""
from __future__ import annotations

import statistics
from typing import Dict, Optional

from fastpipe.record.run_record import RunRecord


def _fmt(value, spec: str, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def held_out_text(values: Optional[Dict[str, float]], primary: Optional[str]) -> str:
    """``accuracy 99.50 % (primary)  loss 0.0213``: the held-out metrics in one line."""
    if not values:
        return "n/a (no held-out split)"
    parts = [f"{k} {100 * v:.2f} %" if k == "accuracy" else f"{k} {v:.4g}" for k, v in values.items()]
    return "  ".join(p + (" (primary)" if k == primary else "") for p, k in zip(parts, values))


def target_text(t: dict) -> str:
    """``accuracy >= 0.95 reached at step 240 in 63.60 s of training (...)``, or not reached and the best."""
    sign = ">=" if t.get("higher_is_better", True) else "<="
    if t.get("reached"):
        return (f"{t['metric']} {sign} {t['value']:g} reached at step {t['steps']} in {t['seconds']:.2f} s of training "
                f"({t['seconds_end_to_end']:.2f} s end to end), {t['samples']:,} samples: "
                + held_out_text({t["metric"]: t["reached_value"]}, None))  # the held-out line's unit
    best = "n/a" if t.get("best_value") is None else held_out_text({t["metric"]: t["best_value"]}, None)
    return f"{t['metric']} {sign} {t['value']:g} NOT reached in {t['seconds']:.2f} s ({t['steps']} steps): best {best}"


def epochs_text(r: RunRecord) -> str:
    """The epochs' training times: one epoch's, or over several their median and range (the first holds the
    warm-up, the last may be cut short by a target or a budget)."""
    times = [t for t in (r.epoch_times_s or []) if t is not None]
    if len(times) <= 1:
        return f"epoch {_fmt(times[0] if times else r.epoch_time_s, '.2f', ' s')}"
    return f"epochs {len(times)}: median {statistics.median(times):.2f} s ({min(times):.2f}-{max(times):.2f} s)"


def lr_search_text(r: RunRecord) -> str:
    """optimizer.lr=auto's range test: the rate, and what the test cost against the run's time to target
    (or its training time): set-up time, off the training clock, but paid before every run that searches."""
    s = r.lr_search
    rate = s["suggestion"] * s.get("factor", 1.0)
    what = f"{rate:.3g} ({s['rule']} of a {s['steps']}-step range test"
    if s.get("reused_from"):
        return f"{what} reused from {s['reused_from']}: 0 s here)"
    reached = (r.target or {}).get("reached") and (r.target or {}).get("seconds")
    against = (f"{100 * s['seconds'] / reached:.0f} % of the {reached:.1f} s to the target" if reached else
               f"{100 * s['seconds'] / r.time_breakdown_s['train']:.0f} % of the {r.time_breakdown_s['train']:.1f} s "
               "of training" if (r.time_breakdown_s or {}).get("train") else "")
    return f"{what}) in {s['seconds']:.1f} s of set-up" + (f": {against}" if against else "")


def summary_text(r: RunRecord) -> str:
    """The run's summary: its steady-state numbers, held-out metrics, FLOPs and warnings."""
    if r.status != "ok":
        return f"fastpipe run FAILED: {r.reason}"
    st = r.step_time_ms or {}
    primary = (r.primary_metric or {}).get("name")
    tokens = f"  ({r.tokens_per_s:,.0f} tokens/s)" if r.tokens_per_s else ""
    lines = [
        "fastpipe run summary",
        f"  throughput   {_fmt(r.throughput, ',.1f')} samples/s{tokens} (steady state, {r.measured_steps} steps)",
        f"  step time    median {_fmt(st.get('median'), '.2f', ' ms')}  p90 {_fmt(st.get('p90'), '.2f', ' ms')}",
        f"  warm-up      {_fmt(r.warmup_s, '.2f', ' s')} (compilation included)   {epochs_text(r)}",
        f"  data-wait    {_fmt(None if r.data_wait_frac is None else 100 * r.data_wait_frac, '.1f', ' %')}"
        f"   GPU util {_fmt(r.gpu_util, '.0f', ' %')}   peak memory {_fmt(r.peak_mem_gb, '.3f', ' GB')}",
        f"  held-out     {held_out_text(r.val_metrics, primary)}   final loss {_fmt(r.final_loss, '.4f')}",
    ]
    if r.weights == "ema":
        lines.append(f"  weights      the EMA's (train.ema_decay); the raw weights: "
                     f"{held_out_text(r.val_metrics_raw, primary)}")
    if r.best:
        lines.append(f"  best         step {r.best['step']}: {held_out_text({primary: r.best['value']}, None)}"
                     + ("   (stopped early: no gain for train.early_stop_patience evaluations)" if r.stopped_early
                        else ""))
    if r.target:
        lines.append(f"  target       {target_text(r.target)}")
    if r.lr_search:
        lines.append(f"  lr search    {lr_search_text(r)}")
    if r.time_breakdown_s:
        t, parts = r.time_breakdown_s, r.setup_parts_s
        top = max(parts, key=parts.get) if parts else None
        lines.append(f"  time         {t['wall_s']:.2f} s wall: "
                     + "  ".join(f"{k} {t[k]:.2f}" + (f" (largest: {top} {parts[top]:.2f})" if k == "setup" and top else "")
                                 for k in ("setup", "compile", "train", "eval", "checkpoint"))
                     + (f"   compile cache {r.compile_cache['state']}" if r.compile_cache else ""))
    if r.stopped_by == "time_budget":
        lines.append("  stopped      train.time_budget_s: the training clock ran out (checkpointed; resume to go on)")
    if r.corpus_baselines:
        b = r.corpus_baselines
        lines.append(f"  baselines    corpus entropy per token: bigram {b['bigram']:.3f}  unigram {b['unigram']:.3f}  "
                     f"uniform {b['uniform']:.3f} nats")
    if r.flops_per_sample:
        flops = r.flops_per_sample
        amount = f"{flops / 1e9:.3f} GFLOP" if flops >= 1e8 else f"{flops / 1e6:.3f} MFLOP"
        lines.append(f"  model FLOPs  {amount}/sample (fwd+bwd)   MFU "
                     + (f"{100 * r.mfu:.1f} % of {r.peak_tflops:.0f} TFLOP/s" if r.mfu is not None
                        else "n/a (no peak for this device)"))
    lines += [f"  warning      {w}" for w in r.warnings or []]
    return "\n".join(lines)
