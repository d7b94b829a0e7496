"""report.md's header: the sweep, the machine and code the jobs ran, the baseline and the rule each
job is held to, the winner, what a halving sweep did, and the notes."""
from __future__ import annotations

import platform
from importlib import metadata
from typing import List, Optional

from fastpipe.record.provenance import describe
from fastpipe.report.columns import num
from fastpipe.report.formats import metric_text, ordinal, sent_out_by
from fastpipe.report.lr_found import suggestion_lines
from fastpipe.report.rows import FINISHED
from fastpipe.report.aggregate import SweepResult
from fastpipe.report.time_to_target import header_lines as target_header
from fastpipe.sweeps.race.stats import p_text

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


def primary_metric(result: SweepResult) -> Optional[str]:
    """The primary metric the rows share (the baseline's), e.g. ``accuracy`` or ``loss``."""
    names = [r["metric"] for r in ([result.baseline] if result.baseline else []) + result.rows if r.get("metric")]
    return names[0] if names else None


def _label(r: dict, columns: List[str]) -> str:
    return " ".join(f"{k}={r['swept'][k]}" for k in columns) or f"job {r['job']}"


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


def race_lines(record) -> List[str]:
    """What a race did: its settings and method, rounds, caps, who left when, and its runs against fixed repeats."""
    from fastpipe.sweeps.race.rounds import planned
    from fastpipe.sweeps.race.stats import METHOD

    s, rounds = record.settings, record.rounds
    runs = sum(len(r["jobs"]) for r in rounds)
    cap = (f"a round capped at {s['cap']:g}x the leader's median time once it reached the target "
           f"{s.get('cap_after', 1)} time(s)" if s.get("cap") else "no cap")
    seeds = f"seeds {record.seed_base}..{record.seed_base + len(rounds) - 1}" if rounds else "no round yet"
    who = "the finalists' race" if record.folder else "race"
    first = planned(record).first_look(len(record.entrants))
    method = "an earlier fastpipe's tests" if record.older else METHOD
    lines = [f"- {who}: {len(record.entrants)} configurations over {seeds} (tests from the {ordinal(first)} seed, at "
             f"most {s['max_rounds']} seeds; alpha {s['alpha']:g} over the whole race: {method}; {cap}); "
             f"{len(rounds)} round(s), {runs} runs in {_duration(record.wall_s())} of rounds"
             + (f", {record.parallel} at a time" if record.parallel > 1 else "")
             + (f"; stopped: {record.stopped_by.replace('_', ' ')}" if record.stopped_by else "")]
    out = [f"job {n} after round {e['round']} ({sent_out_by(e)}{p_text(e['p'])})"
           for n, e in record.eliminated.items() if e["p"] is not None]
    failed = [f"job {n} in round {e['round']} ({e['reason']})" for n, e in record.eliminated.items() if e["p"] is None]
    if out or failed:
        lines.append("- " + "; ".join(x for x in (f"sent out: {', '.join(out)}" if out else "",
                                                  f"failed: {', '.join(failed)}" if failed else "") if x))
    capped = [r for r in rounds if r.get("capped") and r.get("cap_s")]  # without a cap: the runs' own time budget
    if capped:
        spent = sum(r["cap_s"] * len(r["capped"]) for r in capped)
        lines.append(f"- caps: {sum(len(r['capped']) for r in capped)} run(s) stopped at their round's cap and count as "
                     f"misses (rounds {', '.join(str(r['round']) for r in capped)}; {spent:,.0f} s of training spent "
                     "on them)")
    silent = [str(r["round"]) for r in rounds if r.get("told_nothing")]
    if silent:
        lines.append(f"- round(s) {', '.join(silent)}: every job missed the target, so they told nothing about which "
                     "is sooner (every pair ties in them)")
    if rounds:
        lines.append(f"- cost: {runs} runs against {len(record.entrants) * len(rounds)} for every job on every seed "
                     f"(report.repeats={len(rounds)})")
    return lines


def _status_counts(rows: List[dict]) -> str:
    """"4 ok, 1 unmeasured, 1 not ok": a job that finished without a steady-state window, or whose compile
    ran eager, finished (it can win) but is not counted as plainly ok."""
    finished = [r["status"] for r in rows if r["status"] in FINISHED]
    counts = [f"{finished.count('ok')} ok"] + [f"{finished.count(s)} {s}" for s in FINISHED[1:] if s in finished]
    return ", ".join(counts + [f"{len(rows) - len(finished)} not ok"])


def header_lines(result: SweepResult) -> List[str]:
    """The lines above the table."""
    rows, cols, base, best = result.rows, result.columns, result.baseline, result.best
    out = [f"- sweep: `{result.sweep_dir}` · {len(rows)} jobs, {_status_counts(rows)}"]
    out += machine_lines(result) + provenance_lines(result)
    how = "named by report.baseline" if result.spec.baseline not in (None, "") else "the first listed value of every swept key"
    out.append(f"- baseline: job {base['job']} ({_label(base, cols)}), {how}" if base else "- baseline: none")
    metric = primary_metric(result)
    if result.spec.objective == "time_to_target":
        out += target_header(result, result.spec.target_clock)
    else:
        direction = "higher" if (base or {}).get("higher_is_better", True) else "lower"
        out.append(f"- parity: the primary held-out metric ({metric or 'none'}, {direction} is better) may be at most "
                   f"report.parity_tol={result.spec.parity_tol:g} worse than the baseline's (absolute, in its own "
                   "units); n/a = nothing to compare")
        if best:
            speed = f", {best['speedup']:.2f}x the baseline" if best["speedup"] is not None else ""
            by = (f" (report.objective=primary_metric: the best {best['metric']}, "
                  f"{metric_text(best['metric'], best['metric_value'])})" if result.spec.objective == "primary_metric"
                  and best["metric_value"] is not None else "")
            out.append(f"- best: job {best['job']} ({_label(best, cols)}): {num(best['throughput'], ',.1f')} "
                       f"samples/s{speed}{by} → `best.yaml`")
    if result.halving:
        out += halving_lines(result.halving)
    if result.race is not None:
        out += race_lines(result.race)
    out += result.confidence.lines + suggestion_lines(result)
    out += [f"- note: {n}" for n in result.notes]
    kinds = sorted({r["peak_mem_kind"] for r in rows if r.get("peak_mem_kind")})
    if kinds:
        out.append(f"- peak memory: {', '.join(MEMORY_KINDS.get(k, k) for k in kinds)}")
    return out
