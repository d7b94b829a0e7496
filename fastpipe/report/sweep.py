"""Sweep aggregation: read a sweep folder's jobs, pick the baseline, judge parity, pick the winner.

Pure logic (no files written here); ``write_report`` hands the result to the writers in
tables.py, plots.py, hparams.py and winner.py.

- Baseline: the job with the first listed value of every swept key (Hydra's BasicSweeper runs the
  cartesian product in that order, so it is normally job 0), or the job ``report.baseline`` names.
- Parity: each job's task names its primary held-out metric and its direction (accuracy, higher is
  better; an LM's loss, lower is better). A job whose primary metric is worse than the baseline's by
  more than ``report.parity_tol`` (absolute, in the metric's own units) is ``FAIL``ed and never
  chosen. A missing metric (dataset=synthetic, a failed baseline) gives ``n/a``, which does not
  disqualify: there is nothing to compare.
- Best: the fastest job with status ok (no compile fall-back) whose parity did not fail; with
  ``report.objective=primary_metric``, the one with the best primary metric (ties: the faster).
- Halving sweeps (``halving.json`` in the folder): a combination dropped after a probe is a row of its
  own, status ``pruned``, from its last probe's folder; the sweep's times: fastpipe/report/timing.py.
- Jobs run by the ``gpus`` launcher carry its ``launcher.json``: the GPUs and cores that measured them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from fastpipe.record import results
from fastpipe.errors import ConfigError
from fastpipe.record.overrides import measured_overrides, override_key
from fastpipe.report import target as to_target
from fastpipe.report.target import target_fields
from fastpipe.report.timing import cores_text, gpus_text, job_seconds, launcher_info


@dataclass
class SweepSpec:
    """What the report needs from the sweep's own config (multirun.yaml or the callback's)."""

    task_overrides: List[str] = field(default_factory=list)  # the -m command line, sweeps included
    params: Dict[str, str] = field(default_factory=dict)  # hydra.sweeper.params (preset sweeps)
    baseline: Optional[str] = None  # report.baseline
    parity_tol: float = 0.01  # report.parity_tol
    objective: str = "throughput"  # report.objective: what makes the winner
    target_clock: str = "training"  # report.target_clock: the clock time_to_target ranks by


@dataclass
class Job:
    num: int
    dir: Path
    overrides: List[str]
    metrics: Optional[dict]
    pruned_round: Optional[int] = None  # halving: the probe round it went no further than (dir is that probe's)
    probe: Optional[dict] = None  # halving: its last probe's metrics
    note: Optional[str] = None  # halving: why it was dropped
    full: bool = False  # halving: it trained at full length

    def values(self) -> Dict[str, str]:
        """Everything that identifies the job: group choices, then its overrides (key -> value)."""
        values = {k: str(v) for k, v in ((self.metrics or {}).get("choices") or {}).items()}
        for o in measured_overrides(self.overrides):
            if "=" in o and not o.startswith("~"):
                values[override_key(o)] = _unquote(o.split("=", 1)[1])
        return values


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" else value


def spec_from_config(cfg: DictConfig) -> SweepSpec:
    """The SweepSpec of a composed multirun config (the callback's, or a saved multirun.yaml)."""
    plain = OmegaConf.to_container(cfg, resolve=False)  # unresolved: ${now:...} must stay as it is
    hydra = plain.get("hydra") or {}
    task = (hydra.get("overrides") or {}).get("task") or []
    params = (hydra.get("sweeper") or {}).get("params") or {}
    report = plain.get("report") or {}
    tol = report.get("parity_tol")
    return SweepSpec([str(o) for o in task], {str(k): str(v) for k, v in params.items()},
                     report.get("baseline"), 0.01 if tol is None else float(tol),
                     str(report.get("objective") or "throughput"), str(report.get("target_clock") or "training"))


def load_spec(sweep_dir: Path) -> SweepSpec:
    """The spec saved by Hydra's sweeper in ``multirun.yaml`` (defaults if the file is absent)."""
    path = Path(sweep_dir) / "multirun.yaml"
    return spec_from_config(OmegaConf.load(path)) if path.is_file() else SweepSpec()


def load_jobs(sweep_dir: Path) -> List[Job]:
    """Every job folder under ``sweep_dir`` (found by its ``.hydra/overrides.yaml``), by job number."""
    from fastpipe.sweeps.halving import PROBE_PREFIX, read

    jobs = []
    if (Path(sweep_dir) / ".hydra" / "overrides.yaml").is_file():
        raise ConfigError(f"{sweep_dir} is a single run's folder, not a sweep's: its results are in "
                          f"{Path(sweep_dir) / 'metrics.json'}; python -m fastpipe.report reads the folder of a "
                          "`python -m fastpipe -m ...` sweep (outputs/multirun/DATE/TIME)")
    record = read(sweep_dir)
    if record is not None:
        return halving_jobs(Path(sweep_dir), record)
    for path in sorted(Path(sweep_dir).glob("**/.hydra/overrides.yaml")):
        job_dir = path.parent.parent
        if job_dir.parent.name.startswith(PROBE_PREFIX) and job_dir.parent.parent == Path(sweep_dir):
            continue  # a halving sweep's probe whose record is gone: not a job of its own
        hydra_yaml = path.parent / "hydra.yaml"
        num = OmegaConf.select(OmegaConf.load(hydra_yaml), "hydra.job.num", default=None) \
            if hydra_yaml.is_file() else None
        if num is None:
            num = int(job_dir.name) if job_dir.name.isdigit() else len(jobs)
        overrides = [str(o) for o in OmegaConf.to_container(OmegaConf.load(path))]
        jobs.append(Job(int(num), job_dir, overrides, results.read(job_dir)))
    return sorted(jobs, key=lambda j: j.num)


def first_values(spec: SweepSpec) -> List[str]:
    """``key=first value`` of every swept key, combined as Hydra's BasicSweeper combines them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    lines = [f"{k}={v}" for k, v in spec.params.items()] + list(spec.task_overrides)
    try:
        parsed = OverridesParser.create().parse_overrides(lines)
    except Exception:  # e.g. glob() needs Hydra's config loader: fall back to the lowest job
        return []
    final: Dict[str, Optional[str]] = {}
    for o in parsed:  # a later plain override of the same key replaces a sweep, as in the sweeper
        sweep = o.is_sweep_override() and o.is_discrete_sweep()
        final[o.get_key_element()] = next(iter(o.sweep_string_iterator())) if sweep else None
    return [f"{k}={v}" for k, v in final.items() if v is not None]


def parse_baseline(text: str) -> Dict[str, str]:
    """``"precision=amp,compile=off"`` (commas or spaces) -> ``{"precision": "amp", "compile": "off"}``."""
    pairs = [p for p in re.split(r"[,\s]+", text.strip()) if p]
    if not pairs or any("=" not in p for p in pairs):
        raise ConfigError(f"report.baseline={text!r}: name the job by its overrides, e.g. "
                          "'report.baseline=\"precision=amp,compile=off\"', or give a job number")
    return {override_key(p): _unquote(p.split("=", 1)[1]) for p in pairs}


def pick_baseline(jobs: List[Job], spec: SweepSpec) -> Optional[Job]:
    """The baseline job: ``spec.baseline`` if given, else the first value of every swept key."""
    if not jobs:
        return None
    firsts = first_values(spec)
    default = [j for j in jobs if set(firsts) <= set(j.overrides)] if firsts else jobs[:1]
    if spec.baseline in (None, ""):
        return default[0] if default else None
    text = str(spec.baseline).strip()
    if text.isdigit():
        found = [j for j in jobs if j.num == int(text)]
        if not found:
            raise ConfigError(f"report.baseline={text}: no job {text} in this sweep "
                              f"(jobs {', '.join(str(j.num) for j in jobs)})")
        return found[0]
    wanted = parse_baseline(text)
    matches = [j for j in jobs if all(j.values().get(k) == v for k, v in wanted.items())]
    if not matches:
        raise ConfigError(f"report.baseline={text!r} matches no job of this sweep")
    # Keys the user left out: prefer the job that has the default (first) value for them.
    return sorted(matches, key=lambda j: (j not in default, j.num))[0]


def parity(value: Optional[float], base_value: Optional[float], tol: float, higher_is_better: bool = True) -> str:
    """``ok`` when the primary metric held within ``tol`` of the baseline's (in its direction),
    ``FAIL`` if not, ``n/a`` if either is unknown."""
    if value is None or base_value is None:
        return "n/a"
    worse_by = base_value - value if higher_is_better else value - base_value
    return "ok" if worse_by <= tol + 1e-12 else "FAIL"


FINISHED = ("ok", "fallback", "unmeasured")  # job_status of a job that finished (fallback: compile ran eager)


def job_status(metrics: Optional[dict]):
    """(status, reason): ok | failed (or the run's own status) | fallback (compile ran eager) | unmeasured | missing."""
    if metrics is None:
        return "missing", "no metrics.json: the job did not finish (interrupted sweep?)"
    if metrics.get("status") != "ok":  # failed, or another state a run can end in (preempted)
        return str(metrics.get("status") or "failed"), metrics.get("reason") or "unknown"
    if metrics.get("compile_fallback"):
        return "fallback", f"compile fell back to eager: {metrics['compile_fallback']}"
    if metrics.get("throughput") is None:
        return "unmeasured", next(iter(metrics.get("warnings") or []), "no steady-state steps")
    return "ok", None


def swept_columns(jobs: List[Job]) -> List[str]:
    """The keys whose value differs between jobs (overrides' keys first, then group choices)."""
    keys: List[str] = []
    for j in jobs:
        keys += [override_key(o) for o in measured_overrides(j.overrides) if override_key(o) not in keys]
    for j in jobs:
        keys += [k for k in j.values() if k not in keys]
    return [k for k in keys if len({j.values().get(k) for j in jobs}) > 1]


def pick_best(rows: List[dict], objective: str = "throughput") -> Optional[dict]:
    """The fastest row with status ok whose primary metric held (parity not FAIL); with
    ``objective="primary_metric"`` the row with the best primary metric (in its direction), the faster
    one on a tie, among those that have one."""
    eligible = [r for r in rows if r["status"] == "ok" and r["parity"] != "FAIL" and r["throughput"] is not None]
    if objective == "primary_metric":
        scored = [r for r in eligible if r["metric_value"] is not None]
        if scored:
            return max(scored, key=lambda r: (r["metric_value"] if r["higher_is_better"] else -r["metric_value"],
                                              r["throughput"]))
    return max(eligible, key=lambda r: r["throughput"]) if eligible else None


def halving_jobs(sweep_dir: Path, record) -> List[Job]:
    """A halving sweep's jobs, one per grid combination: its full run (``N/``) if it had one, else its
    last probe (``probe-R/N/``), marked pruned; a combination not reached yet is missing."""
    from fastpipe.sweeps.halving import probe_folder

    if record.settings.get("mode") == "time_to_target":
        return target_halving_jobs(sweep_dir, record)
    jobs = []
    for num, overrides in enumerate(record.combos):
        last = record.last_round(num)
        probe_dir = sweep_dir / probe_folder(last["round"]) / str(num) if last else None
        probe = results.read(probe_dir) if probe_dir is not None else None
        if num in record.finals or last is None or num in (last.get("kept") or []):
            job_dir = sweep_dir / str(num)
            jobs.append(Job(num, job_dir, list(overrides), results.read(job_dir), probe=probe, full=True))
            continue
        kept = last.get("kept") or []
        rate = (last.get("throughput") or {}).get(str(num))
        note = (f"dropped in round {last['round']}: {rate:,.1f} samples/s after {last['steps']} steady-state steps, "
                f"slower than the {len(kept)} kept (slowest kept {last['cutoff']:,.1f})"
                if rate is not None and last.get("cutoff") is not None else f"dropped in round {last['round']}")
        jobs.append(Job(num, probe_dir, list(overrides), probe, pruned_round=last["round"], probe=probe, note=note))
    return jobs


def target_halving_jobs(sweep_dir: Path, record) -> List[Job]:
    """A time-to-target halving sweep's jobs: every combination in its own folder ``N/``; one dropped
    in a round is pruned, with the round's reason."""
    jobs = []
    for num, overrides in enumerate(record.combos):
        metrics = results.read(sweep_dir / str(num))
        dropped = next((r for r in record.rounds if num in (r.get("dropped") or [])), None)
        if dropped is None:
            jobs.append(Job(num, sweep_dir / str(num), list(overrides), metrics, full=True))
            continue
        if dropped.get("reached"):
            note = (f"dropped in round {dropped['round']}: still short of the target at {dropped['budget_s']:,.1f} s, "
                    f"when job(s) {', '.join(map(str, dropped['reached']))} had reached it")
        else:
            value, cutoff = (dropped.get("values") or {}).get(str(num)), dropped.get("cutoff")
            note = (f"dropped in round {dropped['round']} at {dropped['budget_s']:,.1f} s of training: best primary metric "
                    f"{'n/a' if value is None else format(value, '.4g')}, below the {len(dropped.get('kept') or [])} "
                    f"kept (worst kept {'n/a' if cutoff is None else format(cutoff, '.4g')})")
        jobs.append(Job(num, sweep_dir / str(num), list(overrides), metrics, pruned_round=dropped["round"],
                        probe=metrics, note=note))
    return jobs


def _row(job: Job, columns: List[str], clock: str = "training") -> dict:
    m = job.metrics or {}
    status, reason = job_status(job.metrics)
    pruned = job.pruned_round is not None
    if pruned and status == "ok":
        status, reason = "pruned", job.note
    elif pruned:
        reason = f"probe (round {job.pruned_round}): {reason}"
    rep, step = m.get("repeats") or {}, m.get("step_time_ms") or {}
    primary = m.get("primary_metric") or ({"name": "accuracy", "value": m["accuracy"], "higher_is_better": True}
                                          if m.get("accuracy") is not None else {})  # records before 0.2
    pct = lambda v: None if v is None else 100.0 * v  # noqa: E731
    values = job.values()
    if pruned:  # a probe's held-out numbers come from a few steps of training: never compared
        primary = {}
    info = launcher_info(job.dir)
    return {
        "job": job.num, "dir": str(job.dir), "swept": {k: values.get(k, "") for k in columns},
        "overrides": measured_overrides(job.overrides), "choices": dict(m.get("choices") or {}),
        "status": status, "reason": reason, "throughput": m.get("throughput"),
        "throughput_min": rep.get("min"), "throughput_max": rep.get("max"), "repeats": rep.get("n", 1),
        "speedup": None, "epoch_time_s": m.get("epoch_time_s"), "warmup_s": m.get("warmup_s"),
        "data_wait_pct": pct(m.get("data_wait_frac")), "gpu_util_pct": m.get("gpu_util"),
        "peak_mem_gb": m.get("peak_mem_gb"), "peak_mem_kind": m.get("peak_mem_kind"),
        "mfu_pct": pct(m.get("mfu")),
        "metric": primary.get("name"), "metric_value": primary.get("value"),
        "higher_is_better": primary.get("higher_is_better", True), "metric_delta": None, "parity": "n/a",
        "accuracy": None if pruned else m.get("accuracy"), "val_metrics": None if pruned else m.get("val_metrics"),
        "step_time_median_ms": step.get("median"), "step_time_p90_ms": step.get("p90"),
        "final_loss": m.get("final_loss"), "env": m.get("env"), "baseline": False, "best": False,
        "batch_size": m.get("batch_size"), "batch_searched": bool(m.get("batch_size_search")),
        "gpus": gpus_text(info, m.get("env")), "cpus": cores_text(info), "round": job.pruned_round,
        "stage": None if job.probe is None and not job.full else ("full" if job.full else "probe"),
        "probe_throughput": (job.probe or {}).get("throughput"), "job_time_s": job_seconds(job.dir, info),
        "name": m.get("name"), "tags": list(m.get("tags") or []), "code": m.get("code"),
        **target_fields(m, clock),
    }


@dataclass
class SweepResult:
    sweep_dir: Path
    spec: SweepSpec
    rows: List[dict]  # sorted: fastest first, rows without a throughput last
    columns: List[str]  # the swept keys
    baseline: Optional[dict]
    best: Optional[dict]
    notes: List[str]
    halving: Optional[dict] = None  # halving sweeps: rounds and times (fastpipe/report/timing.py)


def aggregate(sweep_dir: Path, jobs: List[Job], spec: SweepSpec) -> SweepResult:
    """Rows with speed-ups and parity verdicts, the baseline row and the winner."""
    columns = swept_columns(jobs)
    rows = [_row(j, columns, spec.target_clock) for j in jobs]
    base_job, notes = pick_baseline(jobs, spec), []
    base = next((r for r in rows if base_job is not None and r["job"] == base_job.num), None)
    if base is None:
        notes.append("no baseline job found (the first-value job is not in this folder): no speed-ups")
    else:
        base["baseline"] = True
        if base["status"] not in FINISHED:  # a run still going, or one that did not finish: not a baseline
            notes.append(f"the baseline (job {base['job']}) is {base['status']}"
                         f"{' (still going, or its process died)' if base['status'] == 'running' else ''}: "
                         "no speed-ups")
        elif base["throughput"] is None and spec.objective != "time_to_target":
            notes.append(f"the baseline (job {base['job']}) has no throughput ({base['status']}): no speed-ups")
        if base["metric_value"] is None and base["status"] in FINISHED:
            notes.append("the baseline has no held-out metric (dataset=synthetic or not ok): parity is n/a")
    for r in rows:
        if base is not None and base["status"] in FINISHED and base["throughput"] and r["throughput"] is not None:
            r["speedup"] = r["throughput"] / base["throughput"]
        comparable = (base is not None and base["status"] in FINISHED and base["metric_value"] is not None
                      and r["metric"] == base["metric"])
        base_value = base["metric_value"] if comparable else None
        if r["metric_value"] is not None and base_value is not None:
            r["metric_delta"] = r["metric_value"] - base_value
        r["parity"] = parity(r["metric_value"], base_value, spec.parity_tol, r["higher_is_better"])
        if r is base and r["metric_value"] is not None:
            r["parity"] = "baseline"
    if spec.objective == "time_to_target":
        best = to_target.rank(rows, base, notes)
    else:
        best = pick_best(rows, spec.objective)
        if best is None:
            notes.append("no job qualifies as best (none is ok with its primary metric held)")
    if best is not None:
        best["best"] = True
    halving = None
    from fastpipe.report.timing import summarize
    from fastpipe.sweeps.halving import read

    record = read(sweep_dir)
    if record is not None:
        halving = summarize(Path(sweep_dir), record, jobs, rows)
    rows.sort(key=to_target.sort_key if spec.objective == "time_to_target" else
              lambda r: (r["throughput"] is None, -(r["throughput"] or 0.0), r["job"]))
    return SweepResult(Path(sweep_dir), spec, rows, columns, base, best, notes, halving)
