"""The report's columns, one ``Column`` each: where its value comes from, its report.md header and cell,
its report.csv field, its HParams metric, and which objectives' tables show it.

``COLUMNS`` is in report order: report.md's table takes the columns its objective shows (the swept keys
after ``job``), report.csv every column that has a field (``csv``), HParams those with an ``hparam``
tag. A column's value is read from a job (``Source``: its metrics.json, folder and launcher record)
when its row is made (rows.py); one without ``value`` is filled in by the aggregation (the speed-up,
parity, baseline and winner: baseline.py, sweep.py, target.py). A new column is one entry here, and
a line in docs/sweeps.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

from fastpipe.record.overrides import measured_overrides
from fastpipe.report.formats import metric_text, sent_out_by
from fastpipe.report.lr_found import found_rate
from fastpipe.report.time_to_target import time_cell
from fastpipe.report.timing import cores_text, gpus_text, job_seconds
from fastpipe.sweeps.race.stats import p_text

THROUGHPUT = ("throughput", "primary_metric")  # objectives whose table ranks by throughput
TIME_TO_TARGET = ("time_to_target",)
EVERY = THROUGHPUT + TIME_TO_TARGET


@dataclass(frozen=True)
class Source:
    """What a row's values are read from: one job (jobs.py's Job), its metrics.json (``{}`` when missing)
    and what rows.py derives from them once."""

    job: Any
    metrics: dict
    status: str  # rows.py's job_status, pruned rows included
    reason: Optional[str]
    primary: dict  # the primary metric's name, value and direction ({} for a pruned probe)
    launcher: Optional[dict]  # the gpus launcher's record (report/timing.py)
    target: dict  # the time-to-target fields (report/target.py's target_fields)


@dataclass(frozen=True)
class Column:
    """One report column. A column shown differently by the two kinds of table (the speed-up, parity and
    warm-up of a time-to-target table) is two entries of one key, only one of them a report.csv field."""

    key: str  # the row's key, and report.csv's field when ``csv``
    value: Optional[Callable[[Source], Any]] = None  # from the job; None: set by the aggregation (starts None)
    header: str = ""  # report.md's header ("{metric}": the sweep's primary metric); "" = not in report.md
    cell: Optional[Callable[[dict], str]] = None  # report.md's cell of a row
    objectives: Tuple[str, ...] = EVERY  # the report.objective values whose report.md table shows it
    shown_if: Optional[Callable[[Any], bool]] = None  # report.md shows it only when this holds of the SweepResult
    csv: bool = True  # a report.csv field (a column drawn twice, once per objective, writes one)
    hparam: str = ""  # its HParams metric tag; "" = none
    description: str = ""  # the HParams metric's description

    def in_table(self, result) -> bool:
        """Whether report.md's table of ``result`` shows this column."""
        return (bool(self.header) and result.spec.objective in self.objectives
                and (self.shown_if is None or self.shown_if(result)))


def num(value: Optional[float], spec: str, suffix: str = "") -> str:
    """A number in a cell (``n/a`` when unknown)."""
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def text_cell(text: str, limit: int = 0) -> str:
    """A table cell: one line, at most ``limit`` characters, its pipes escaped."""
    text = " ".join(str(text).split())
    if limit and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("|", "\\|")


def _job(r: dict) -> str:
    return (f"{r['job']}" + (" (best)" if r["best"] else " (baseline)" if r["baseline"] else "")
            + (" (tie)" if r.get("tie") else ""))


def _halving(r: dict) -> str:
    return "full" if r.get("stage") == "full" else f"round {r['round']}" if r.get("round") else "n/a"


def _throughput(r: dict) -> str:
    """The median samples/s; with repeats their range and count, UNSTABLE past report.max_spread."""
    text = num(r["throughput"], ",.1f")
    if r["repeats"] > 1 and r["throughput_min"] is not None and r["throughput"]:
        text += f" ({r['throughput_min']:,.1f}-{r['throughput_max']:,.1f}, n={r['repeats']})"
    return text + (" UNSTABLE" if r.get("unstable") else "")


def _speedup(r: dict) -> str:
    """Throughput over the baseline's; "within noise" where the two jobs' repeats overlap."""
    return num(r["speedup"], ".2f", "x") + (" (within noise)" if r.get("within_noise") else "")


def _race(r: dict) -> str:
    """A raced job's outcome: winner / last standing / tie / out in round R (by job J, p) / failed, and the seeds it ran."""
    race = r.get("race")
    if race is None:
        return "–"
    seeds = f"{race['seeds']} seed{'s' if race['seeds'] != 1 else ''}"
    if race["state"] == "out":
        return f"out after round {race['round']} ({sent_out_by(race)}{p_text(race['p'])}), {seeds}"
    if race["state"] == "failed":
        return f"failed in round {race['round']}"
    return f"{race['state'].replace('_', ' ')}, {seeds}"


def _warmup(r: dict) -> str:
    """The warm-up seconds, with the compile cache's state for a compiled job (metrics.json's compile_cache)."""
    state = r.get("compile_cache")
    return num(r["warmup_s"], ".2f") + (f" ({state})" if state and state != "off" else "")


def _parity(r: dict) -> str:
    if r["parity"] == "FAIL":
        return f"**FAIL** ({metric_text(r['metric'], r['metric_delta'], delta=True)})"
    return r["parity"]


def _status(r: dict) -> str:
    return "ok" if r["status"] == "ok" else text_cell(f"{r['status']}: {r['reason']}", 140)


def _pct(value: Optional[float]) -> Optional[float]:
    return None if value is None else 100.0 * value


def metric(name: str, default: Any = None) -> Callable[[Source], Any]:
    """The value of metrics.json's ``name`` (``a.b``: a nested key)."""
    def read(s: Source) -> Any:
        node: Any = s.metrics
        for part in name.split("."):
            node = (node or {}).get(part)
        return default if node is None else node
    return read


def target(name: str) -> Callable[[Source], Any]:
    return lambda s: s.target[name]


def _stage(s: Source) -> Optional[str]:
    return None if s.job.probe is None and not s.job.full else ("full" if s.job.full else "probe")


def _any_row(key: str) -> Callable[[Any], bool]:
    return lambda result: any(r.get(key) for r in result.rows)


COLUMNS = (
    Column("job", lambda s: s.job.num, "job", _job),  # the swept keys follow it
    Column("batch_size", metric("batch_size"), "batch", lambda r: num(r.get("batch_size"), ".0f"),
           shown_if=_any_row("batch_searched")),  # train.batch_size=auto: the size each job trained at
    Column("gpus", lambda s: gpus_text(s.launcher, s.metrics.get("env")), "gpus", lambda r: r.get("gpus") or "n/a", shown_if=_any_row("gpus")),
    Column("cpus", lambda s: cores_text(s.launcher)),
    Column("stage", _stage, "halving", _halving, shown_if=lambda result: result.halving is not None),
    Column("round", lambda s: s.job.pruned_round),
    Column("time_to_target_s", target("time_to_target_s"), "time to target (s)", time_cell, TIME_TO_TARGET,
           hparam="time_to_target_s",
           description="seconds until train.target was reached (report.target_clock's clock)"),
    Column("speedup", None, "speed-up", lambda r: "–" if r["speedup"] is None else f"{r['speedup']:.2f}x",
           TIME_TO_TARGET, csv=False),  # the baseline's time / the row's
    Column("target_steps", target("target_steps"), "steps", lambda r: num(r["target_steps"], ",.0f"), TIME_TO_TARGET),
    Column("target_samples", target("target_samples"), "samples", lambda r: num(r["target_samples"], ",.0f"),
           TIME_TO_TARGET),
    Column("parity", None, "reached", lambda r: r["parity"], TIME_TO_TARGET, csv=False),  # target.py's verdict
    Column("race", None, "race", _race, TIME_TO_TARGET, shown_if=lambda result: result.race is not None,
           csv=False),  # the race's outcome per job (race.json has every round)
    Column("compile_cache", target("compile_cache"), "compile cache", lambda r: r.get("compile_cache") or "off",
           TIME_TO_TARGET),
    Column("lr_found", lambda s: found_rate(s.metrics), "lr (found)", lambda r: num(r.get("lr_found"), ".3g"),
           shown_if=_any_row("lr_found")),  # optimizer.lr=auto: the rate the job trained at
    Column("lr_rule", metric("lr_search.rule")),
    Column("lr_factor", metric("lr_search.factor")),
    Column("throughput", metric("throughput"), "throughput (samples/s)", _throughput,
           hparam="throughput", description="training samples/s, steady state"),
    Column("throughput_min", metric("repeats.min")),
    Column("throughput_max", metric("repeats.max")),
    Column("repeats", metric("repeats.n", 1)),
    Column("step_time_median_ms", metric("step_time_ms.median"), "step (ms)",
           lambda r: num(r["step_time_median_ms"], ".2f"), THROUGHPUT),  # the steady state's median step
    Column("speedup", None, "speed-up", _speedup, THROUGHPUT,
           hparam="speedup", description="throughput / the baseline's"),
    Column("epoch_time_s", metric("epoch_time_s"), "epoch (s)", lambda r: num(r["epoch_time_s"], ".2f"), THROUGHPUT,
           hparam="epoch_time_s", description="last epoch's training wall time (s)"),
    Column("warmup_s", metric("warmup_s"), "warm-up/compile (s)", lambda r: num(r["warmup_s"], ".2f"), TIME_TO_TARGET,
           csv=False),  # the time-to-target table names the compile cache in a column of its own
    Column("warmup_s", metric("warmup_s"), "warm-up/compile (s)", _warmup, THROUGHPUT,
           hparam="warmup_s", description="warm-up and compilation (s)"),
    Column("data_wait_pct", lambda s: _pct(s.metrics.get("data_wait_frac")), "data-wait",
           lambda r: num(r["data_wait_pct"], ".1f", " %"),
           hparam="data_wait_pct", description="% of the steady state waiting for data"),
    Column("gpu_util_pct", metric("gpu_util"), "GPU util", lambda r: num(r["gpu_util_pct"], ".0f", " %"), THROUGHPUT,
           hparam="gpu_util_pct", description="mean NVML GPU utilisation (%)"),
    Column("mfu_pct", lambda s: _pct(s.metrics.get("mfu")), "MFU", lambda r: num(r.get("mfu_pct"), ".1f", " %"),
           THROUGHPUT, hparam="mfu_pct", description="model FLOPs utilisation: model FLOPs x samples/s over the "
                                                     "GPU's dense peak for the precision (%)"),
    Column("peak_mem_gb", metric("peak_mem_gb"), "peak mem (GB)", lambda r: num(r["peak_mem_gb"], ".3f"), THROUGHPUT,
           hparam="peak_mem_gb", description="peak memory (GB)"),
    Column("peak_mem_kind", metric("peak_mem_kind")),
    Column("metric", lambda s: s.primary.get("name")),
    Column("metric_value", lambda s: s.primary.get("value"), "held-out {metric}",
           lambda r: metric_text(r["metric"], r["metric_value"]), hparam="primary_metric",
           description="the task's primary held-out metric (e.g. accuracy 0..1, an LM's loss)"),
    Column("metric_delta"),
    Column("accuracy", lambda s: None if s.job.pruned_round is not None else s.metrics.get("accuracy"),
           hparam="accuracy", description="held-out top-1 (0..1), classification"),
    Column("parity", lambda s: "n/a", "parity", _parity, THROUGHPUT),
    Column("status", lambda s: s.status, "status", _status),
    Column("reason", lambda s: s.reason),
    Column("step_time_p90_ms", metric("step_time_ms.p90")),
    Column("step_time_spread_ms", metric("step_time_ms.spread")),  # slowest minus fastest window's step
    Column("step_windows", metric("step_time_ms.windows")),
    Column("final_loss", metric("final_loss")),
    Column("target_reached", target("target_reached"), hparam="target_reached",
           description="1 when the run reached train.target, 0 when it did not"),
    Column("target", target("target")),
    Column("target_seconds", target("target_seconds")),
    Column("target_runs", target("target_runs")),  # runs of the job (repeats, a race's rounds)
    Column("target_missed", target("target_missed")),  # of them, those that missed the target (or a race's cap)
    Column("target_best", target("target_best")),
    Column("baseline", lambda s: False),
    Column("best", lambda s: False),
    Column("probe_throughput", lambda s: (s.job.probe or {}).get("throughput")),
    Column("job_time_s", lambda s: job_seconds(s.job.dir, s.launcher)),
    Column("overrides", lambda s: measured_overrides(s.job.overrides)),
    Column("dir", lambda s: str(s.job.dir)),
)
