"""report.md and report.csv: one row per job, fastest first, with the machine on top."""
from __future__ import annotations

import csv
import io
import platform
from importlib import metadata
from typing import List, Optional

from fastpipe.config.logger import logger_class, logger_names
from fastpipe.record.provenance import describe
from fastpipe.report.formats import metric_text
from fastpipe.report.sweep import SweepResult
from fastpipe.report.target import header_lines as target_header
from fastpipe.report.target import time_cell

CSV_FIELDS = ("job", "status", "reason", "throughput", "throughput_min", "throughput_max", "repeats",
              "speedup", "epoch_time_s", "warmup_s", "data_wait_pct", "gpu_util_pct", "mfu_pct", "peak_mem_gb",
              "peak_mem_kind", "metric", "metric_value", "metric_delta", "accuracy", "parity", "step_time_median_ms",
              "step_time_p90_ms", "final_loss", "time_to_target_s", "target_reached", "target", "target_seconds",
              "target_steps", "target_samples", "target_best", "compile_cache", "baseline", "best", "batch_size", "gpus", "cpus", "stage", "round",
              "probe_throughput", "job_time_s", "overrides", "dir")


MEMORY_KINDS = {"cpu_max_rss_process": "the training process's peak RSS (CPU)",
                "cuda_max_memory_allocated_after_warmup": "torch.cuda.max_memory_allocated after warm-up"}


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "n/a"


def machine_lines(result: SweepResult) -> List[str]:
    """The machine and versions the jobs ran on (from their metrics.json ``env``)."""
    envs = [r["env"] for r in result.rows if r.get("env")]
    ran = [e for e in envs if e.get("device")] or envs  # jobs that got as far as picking a device
    if not ran:
        return ["- machine: unknown (no job recorded its environment)"]
    e = ran[0]
    device = e.get("device") or "?"
    lines = [f"- machine: {e.get('host')} · {e.get('cpu_count')} CPU cores · device {device} "
             f"({e.get('device_name')}) · world size {e.get('world_size')}",
             f"- versions: torch {e.get('torch')} · CUDA {e.get('cuda') or 'none'}"
             + (f" · cuDNN {e['cudnn']}" if e.get("cudnn") else "")
             + f" · python {e.get('python')} · hydra {_version('hydra-core')} · fastpipe {_version('fastpipe')}"
             + f" · report written on {platform.node()}"]
    hosts = sorted({str(x.get("host")) for x in ran} | {str(x.get("device_name")) for x in ran})
    if len({(x.get("host"), x.get("device_name")) for x in ran}) > 1:
        lines.append(f"- WARNING: the jobs ran on different machines/devices ({', '.join(hosts)}): not comparable")
    return lines


def provenance_lines(result: SweepResult) -> List[str]:
    """The code the jobs ran (metrics.json's ``code``), a warning when they ran different code, and the
    jobs' name, tags and logger choice."""
    codes = [r["code"] for r in result.rows if r.get("code")]
    lines = []
    if codes:
        lines.append(f"- code: {describe(codes[0])}")
        seen = {_code_key(c): c for c in codes}
        if len(seen) > 1:
            lines.append(f"- WARNING: the jobs ran on {len(seen)} different commits or working trees "
                         f"({'; '.join(describe(c) for c in seen.values())}): they measured different code")
    names = sorted({r["name"] for r in result.rows if r.get("name")})
    tags = sorted({t for r in result.rows for t in r.get("tags") or []})
    loggers = sorted({str((r.get("choices") or {}).get("logger")) for r in result.rows
                      if (r.get("choices") or {}).get("logger")})
    parts = [f"name: {', '.join(names)}" if names else "", f"tags: {', '.join(tags)}" if tags else "",
             f"logger: {' / '.join(loggers)}" if loggers else ""]
    if any(parts):
        lines.append("- " + " · ".join(x for x in parts if x))
    return lines


def _code_key(code: dict) -> tuple:
    project, fp = code.get("project") or {}, code.get("fastpipe") or {}
    return project.get("commit"), project.get("diff_sha256"), fp.get("commit"), fp.get("version")


def _num(value: Optional[float], spec: str, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def _warmup(r: dict) -> str:
    """The warm-up cell, with the compile cache's state for a compiled job (metrics.json's compile_cache)."""
    state = r.get("compile_cache")
    return _num(r["warmup_s"], ".2f") + (f" ({state})" if state and state != "off" else "")


def _cell(text: str, limit: int = 0) -> str:
    text = " ".join(str(text).split())  # one line per cell
    if limit and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("|", "\\|")


def _throughput(r: dict) -> str:
    text = _num(r["throughput"], ",.1f")
    if r["repeats"] > 1 and r["throughput_min"] is not None and r["throughput"]:
        half = (r["throughput_max"] - r["throughput_min"]) / 2 / r["throughput"]
        text += f" ±{100 * half:.1f}% (n={r['repeats']})"
    return text


def primary_metric(result: SweepResult) -> Optional[str]:
    """The primary metric the rows share (the baseline's), e.g. ``accuracy`` or ``loss``."""
    names = [r["metric"] for r in ([result.baseline] if result.baseline else []) + result.rows if r.get("metric")]
    return names[0] if names else None


def _parity(r: dict) -> str:
    if r["parity"] == "FAIL":
        return f"**FAIL** ({metric_text(r['metric'], r['metric_delta'], delta=True)})"
    return r["parity"]


def _status(r: dict) -> str:
    return "ok" if r["status"] == "ok" else _cell(f"{r['status']}: {r['reason']}", 140)


def _duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "n/a"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{seconds:,.0f} s" if minutes == 0 else f"{seconds:,.0f} s ({minutes} min {secs:02d} s)"


def target_halving_lines(h: dict) -> List[str]:
    """What a time-to-target halving sweep did, round by round, for report.md's header."""
    s = h["settings"]
    source = (f"round 1's budget hydra.sweeper.budget_s={s['budget_s']:g} s, x 1/keep each round" if s.get("budget_s")
              else f"the last round's budget the baseline's (job {h['baseline']}) time, x keep for each earlier one")
    steps = "; ".join(f"round {r['round']}: {r['probes']} to {r['budget_s']:,.1f} s, {r['reached']} reached the target, "
                      f"{r['kept']} kept, {r['dropped']} dropped" + (f", {r['finished']} ended" if r["finished"] else "")
                      + (f", {r['failed']} failed" if r["failed"] else "") for r in h["rounds"])
    finals = [n for n in h["finals"] if n != h["baseline"]]
    return [f"- halving by time to target: {h['combinations']} combinations (keep={s.get('keep')}, "
            f"finalists={s.get('finalists')}; {source}); {steps or 'no round was needed'}; "
            + (f"finalists {', '.join(map(str, finals))} trained on to the end of their runs; " if finals else "")
            + ("a promoted combination resumed from its own checkpoint, its training clock continuing"
               if any(r["kept"] for r in h["rounds"]) else "nobody needed promoting"),
            f"- time: this sweep took {_duration(h['wall_s'])} of wall time"
            + (f", {h['parallel']} jobs at a time" if h["parallel"] > 1 else "")]


def halving_lines(h: dict) -> List[str]:
    """What a halving sweep did and what it saved against the full grid, for report.md's header."""
    if h.get("mode") == "time_to_target":
        return target_halving_lines(h)
    s = h["settings"]
    steps = "; ".join(f"round {r['round']}: {r['probes']} probe(s) of {r['steps']} steady-state steps, "
                      f"{r['kept']} kept" + (f", {r['failed']} failed" if r["failed"] else "") for r in h["rounds"])
    lines = [f"- halving: {h['combinations']} combinations (hydra.sweeper.probe_steps={s.get('probe_steps')}, "
             f"keep={s.get('keep')}, finalists={s.get('finalists')}); {steps or 'no probes were needed'}; "
             f"{len(h['finals'])} full run(s), the baseline's included; pruned rows show their last probe's "
             "throughput"]
    at_once = f", {h['parallel']} jobs at a time" if h["parallel"] > 1 else ""
    line = (f"- time: this sweep took {_duration(h['wall_s'])} of wall time{at_once}; its jobs "
            f"{_duration(h['job_s'])} (probes {h['probe_job_s']:,.0f} s, full runs {h['full_job_s']:,.0f} s)")
    if h["grid_job_s"]:
        line += (f"; the full grid's jobs would have taken ≈ {_duration(h['grid_job_s'])} ({h['measured']} measured, "
                 f"{h['estimated']} estimated from their probes) → this sweep's jobs took "
                 f"{100 * h['job_s'] / h['grid_job_s']:.0f} % of the grid's")
        if h["check_max_error"] is not None:
            line += (f" (the estimate, tried on the {h['checked']} finalist(s), missed their measured full runs by at "
                     f"most {100 * h['check_max_error']:+.0f} %)")
    elif h["not_estimated"]:
        line += f"; the full grid's time cannot be estimated ({h['not_estimated']} combination(s) lack the numbers)"
    return lines + [line]


def _label(r: dict, columns: List[str]) -> str:
    return " ".join(f"{k}={r['swept'][k]}" for k in columns) or f"job {r['job']}"


def markdown(result: SweepResult) -> str:
    """The whole report.md text."""
    rows, cols = result.rows, result.columns
    ok = sum(r["status"] == "ok" for r in rows)
    base, best = result.baseline, result.best
    kinds = sorted({r["peak_mem_kind"] for r in rows if r.get("peak_mem_kind")})
    out = ["# fastpipe sweep report", "",
           f"- sweep: `{result.sweep_dir}` · {len(rows)} jobs, {ok} ok, {len(rows) - ok} not ok"]
    out += machine_lines(result)
    out += provenance_lines(result)
    how = "named by report.baseline" if result.spec.baseline not in (None, "") else "the first listed value of every swept key"
    out.append(f"- baseline: job {base['job']} ({_label(base, cols)}), {how}" if base else "- baseline: none")
    metric = primary_metric(result)
    direction = "higher" if (result.baseline or {}).get("higher_is_better", True) else "lower"
    to_target = result.spec.objective == "time_to_target"
    if to_target:
        out += target_header(result, result.spec.target_clock)
    else:
        out.append(f"- parity: the primary held-out metric ({metric or 'none'}, {direction} is better) may be at most "
                   f"report.parity_tol={result.spec.parity_tol:g} worse than the baseline's (absolute, in its own "
                   "units); n/a = nothing to compare")
    if best and not to_target:
        speed = f", {best['speedup']:.2f}x the baseline" if best["speedup"] is not None else ""
        by = (f" (report.objective=primary_metric: the best {best['metric']}, "
              f"{metric_text(best['metric'], best['metric_value'])})" if result.spec.objective == "primary_metric"
              and best["metric_value"] is not None else "")
        out.append(f"- best: job {best['job']} ({_label(best, cols)}): {_num(best['throughput'], ',.1f')} "
                   f"samples/s{speed}{by} → `best.yaml`")
    if result.halving:
        out += halving_lines(result.halving)
    out += [f"- note: {n}" for n in result.notes]
    if kinds:
        out.append(f"- peak memory: {', '.join(MEMORY_KINDS.get(k, k) for k in kinds)}")
    out.append("")
    gpus = any(r.get("gpus") for r in rows)
    batch = any(r.get("batch_searched") for r in rows)  # train.batch_size=auto: the size each job trained at
    halving = result.halving is not None
    head = ["job"] + cols + ["batch"] * batch + ["gpus"] * gpus + ["halving"] * halving + ([
        "time to target (s)", "speed-up", "steps", "samples", "reached", "compile cache", "throughput (samples/s)",
        "warm-up/compile (s)", "data-wait", f"held-out {metric or 'metric'}", "status"] if to_target else [
        "throughput (samples/s)", "speed-up", "epoch (s)", "warm-up/compile (s)", "data-wait", "GPU util", "MFU",
        "peak mem (GB)", f"held-out {metric or 'metric'}", "parity", "status"])
    out += ["| " + " | ".join(_cell(h) for h in head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        mark = " (best)" if r["best"] else " (baseline)" if r["baseline"] else ""
        stage = "full" if r.get("stage") == "full" else f"round {r['round']}" if r.get("round") else "n/a"
        cells = [f"{r['job']}{mark}"] + [_cell(r["swept"][k], 60) for k in cols] \
            + [_num(r.get("batch_size"), ".0f")] * batch + [r.get("gpus") or "n/a"] * gpus \
            + [stage] * halving + ([
            time_cell(r), "–" if r["speedup"] is None else f"{r['speedup']:.2f}x", _num(r["target_steps"], ",.0f"),
            _num(r["target_samples"], ",.0f"), r["parity"], r.get("compile_cache") or "off", _throughput(r),
            _num(r["warmup_s"], ".2f"), _num(r["data_wait_pct"], ".1f", " %"),
            metric_text(r["metric"], r["metric_value"]), _status(r)] if to_target else [
            _throughput(r), _num(r["speedup"], ".2f", "x"), _num(r["epoch_time_s"], ".2f"),
            _warmup(r), _num(r["data_wait_pct"], ".1f", " %"), _num(r["gpu_util_pct"], ".0f", " %"),
            _num(r.get("mfu_pct"), ".1f", " %"), _num(r["peak_mem_gb"], ".3f"), metric_text(r["metric"], r["metric_value"]), _parity(r), _status(r)])
        out.append("| " + " | ".join(cells) + " |")
    out += ["", ("Time to target: the clock when the first whole-split evaluation reached the target (> N s: not "
                 "reached in the N s the job trained, with its best value); speed-up = the baseline's time / the row's "
                 "(– when the baseline did not reach it); steps and samples up to that evaluation; compile cache = "
                 "Inductor's FX-graph cache for the job's compilation (warm: every graph from the cache, cold: none, "
                 "off: not compiled). " if to_target else "")
            + "Throughput is the steady state (warm-up and compilation excluded, timed apart as "
            "warm-up/compile)" + (". " if to_target else "; speed-up = throughput / the baseline's. MFU = model FLOPs "
                                  "(fwd+bwd, the model's own count or torch.utils.flop_counter: metrics.json's "
                                  "flops_method) x samples/s over the GPU's dense datasheet peak for the precision "
                                  "(bf16's for precision=fp8). warm-up/compile names a compiled job's Inductor FX-graph "
                                  "cache: (cold) every graph compiled, (warm) every one from the cache, (partial), or "
                                  "(none): the caches off. ")
            + ("batch = the batch size each job trained at (train.batch_size=auto found it: graph.txt says how). "
               if batch else "")
            + ("gpus = the GPU(s) that measured the job: those the gpus launcher gave it (its CUDA_VISIBLE_DEVICES; "
               "cpu = none), else its CUDA device. " if gpus else "")
            + ("halving: full = trained on to its end (or the target); round R = dropped after round R (status "
               "pruned: its numbers are where it stopped). " if halving and to_target else
               "halving: full = trained at full length; round R = dropped after round R's probe (status pruned: the "
               "throughput is the probe's; its held-out metric is not compared). " if halving else "")
            + f"Every job's folder holds its {_job_files(rows)}; the sweep's HParams are in `hparams/` "
            "(`tensorboard --logdir <sweep>/hparams`)."]
    return "\n".join(out) + "\n"


def _job_files(rows) -> str:
    """The files every job's folder holds, from the loggers the jobs chose (``[tensorboard,mlflow]``), in each
    registered logger's own words (its class's ``writes``)."""
    chosen = {name.strip() for r in rows for name in str((r.get("choices") or {}).get("logger") or "tensorboard")
              .strip("[]").split(",")}
    written = [getattr(logger_class(name), "writes", "") for name in logger_names() if name in chosen]
    return ", ".join(["metrics.json", "graph.txt"] + [text for text in written if text])


def csv_text(result: SweepResult) -> str:
    """report.csv: the same rows, every number at full precision, the swept keys as columns."""
    buf = io.StringIO()
    fields = ["job"] + result.columns + list(CSV_FIELDS[1:])
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in result.rows:
        row = {k: r.get(k) for k in CSV_FIELDS}
        row.update(r["swept"])
        row["overrides"] = " ".join(r["overrides"])
        writer.writerow({k: ("" if v is None else repr(v) if isinstance(v, float) else v) for k, v in row.items()})
    return buf.getvalue()
