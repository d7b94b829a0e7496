"""A sweep folder's jobs: the sweep's own config (``SweepSpec``) and one ``Job`` per job folder.

- A plain sweep: every folder under the sweep holding ``.hydra/overrides.yaml``, by Hydra's job number.
- A halving sweep (``halving.json`` in the folder): one job per grid combination; a combination dropped
  after a probe is its last probe's folder, marked pruned (sweeps/halving/plan.py keeps the record).
- A race (``race.json``): one job per raced configuration, its rounds combined in ``N/metrics.json``
  (sweeps/race/rounds.py); a halving sweep's raced finalists are their ``race/N/`` folders.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from fastpipe.errors import ConfigError
from fastpipe.record import results
from fastpipe.record.overrides import measured_overrides, override_key
from fastpipe.record.run_record import shape_problem
from fastpipe.report import columns


@dataclass
class SweepSpec:
    """What the report needs from the sweep's own config (multirun.yaml or the callback's)."""

    task_overrides: List[str] = field(default_factory=list)  # the -m command line, sweeps included
    params: Dict[str, str] = field(default_factory=dict)  # hydra.sweeper.params (preset sweeps)
    baseline: Optional[str] = None  # report.baseline
    parity_tol: float = 0.01  # report.parity_tol
    objective: str = "throughput"  # report.objective: what makes the winner
    target_clock: str = "training"  # report.target_clock: the clock time_to_target ranks by
    max_spread: float = 0.10  # report.max_spread: repeats of a throughput spread wider than this are unstable
    aggregate: str = "median"  # report.aggregate: how several runs' times to target make one
    noise_floor: float = 0.04  # report.noise_floor: a one-run throughput's run-to-run spread (relative SD)


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
                values[override_key(o)] = unquote(o.split("=", 1)[1])
        return values


def vetted(job_dir: Path, overrides: Optional[List[str]] = None, sweeper_keys=()) -> Optional[dict]:
    """The job folder's record as the report may use it (``results.outcome``), checked first: one that is
    not a record (cut short, not JSON, a value of the wrong type) or is another run's (``overrides``: the
    job's; the record's own set a key of them otherwise, ``sweeper_keys`` aside: those a sweeper sets on its
    own jobs, a probe's length) becomes a failed record saying so, a row with its reason, never a traceback.
    None: the folder has no metrics.json."""
    path = Path(job_dir) / results.FILE
    record = results.outcome(job_dir)
    if record is None:
        return _not_its(path, "is not a run's record (not JSON: cut short?)", overrides) if path.is_file() else None
    problem = shape_problem(record)
    if problem is not None:
        return _not_its(path, f"is not a run's record: {problem}", overrides)
    if overrides is not None and isinstance(record.get("overrides"), list):
        theirs = {override_key(str(o)): str(o).lstrip("+") for o in record["overrides"]}
        other = [o for o in measured_overrides(overrides) if override_key(o) not in sweeper_keys
                 and theirs.get(override_key(o)) != o.lstrip("+")]
        if other:
            said = theirs.get(override_key(other[0]))
            return _not_its(path, f"is another run's: this job sets {other[0]}, the record "
                                  + (f"{said}" if said is not None else "does not"), overrides)
    return record


def _not_its(path: Path, what: str, overrides: Optional[List[str]]) -> dict:
    return {"status": "failed", "reason": f"its {path.name} {what}; run the job again (sweep.resume=true reruns it)",
            "overrides": list(overrides or []), "choices": {}}


def unquote(value: str) -> str:
    return value[1:-1] if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" else value


def spec_from_config(cfg: DictConfig) -> SweepSpec:
    """The SweepSpec of a composed multirun config (the callback's, or a saved multirun.yaml)."""
    plain = OmegaConf.to_container(cfg, resolve=False)  # unresolved: ${now:...} must stay as it is
    hydra = plain.get("hydra") or {}
    task = (hydra.get("overrides") or {}).get("task") or []
    params = (hydra.get("sweeper") or {}).get("params") or {}
    report = plain.get("report") or {}
    tol, spread = report.get("parity_tol"), report.get("max_spread")
    return SweepSpec([str(o) for o in task], {str(k): str(v) for k, v in params.items()},
                     report.get("baseline"), 0.01 if tol is None else float(tol),
                     str(report.get("objective") or "throughput"), str(report.get("target_clock") or "training"),
                     0.10 if spread is None else float(spread), str(report.get("aggregate") or "median"),
                     0.04 if report.get("noise_floor") is None else float(report["noise_floor"]))


def load_spec(sweep_dir: Path) -> SweepSpec:
    """The spec saved by Hydra's sweeper in ``multirun.yaml`` (defaults if the file is absent: by time to
    target where a race's record says the folder is a race, which races by nothing else)."""
    path = Path(sweep_dir) / "multirun.yaml"
    if path.is_file():
        return spec_from_config(OmegaConf.load(path))
    return SweepSpec(objective="time_to_target" if (Path(sweep_dir) / "race.json").is_file() else "throughput")


def load_jobs(sweep_dir: Path) -> List[Job]:
    """Every job folder under ``sweep_dir`` (found by its ``.hydra/overrides.yaml``), by job number."""
    from fastpipe.sweeps.halving.plan import PROBE_PREFIX, read

    jobs = []
    if (Path(sweep_dir) / ".hydra" / "overrides.yaml").is_file():
        raise ConfigError(f"{sweep_dir} is a single run's folder, not a sweep's: its results are in "
                          f"{Path(sweep_dir) / 'metrics.json'}; python -m fastpipe.report reads the folder of a "
                          "`python -m fastpipe -m ...` sweep (outputs/multirun/DATE/TIME)")
    from fastpipe.sweeps.autotune import record as autotune
    from fastpipe.sweeps.race import rounds

    tuned = autotune.read(sweep_dir)
    if tuned is not None:
        return [autotune_job(Path(sweep_dir), t) for t in tuned["trials"]]
    record, raced = read(sweep_dir), rounds.read(sweep_dir)
    if record is not None:
        jobs = halving_jobs(Path(sweep_dir), record)
        return jobs if raced is None else [race_job(Path(sweep_dir), raced, j.num) if j.num in raced.entrants else j
                                           for j in jobs]
    if raced is not None:
        return [race_job(Path(sweep_dir), raced, num) for num in raced.entrants]
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
        jobs.append(Job(int(num), job_dir, overrides, vetted(job_dir, overrides)))
    return sorted(jobs, key=lambda j: j.num)


def autotune_job(sweep_dir: Path, trial: dict) -> Job:
    """An autotune's trial (autotune.json): its job folder ``N/``, or a raced candidate's ``race-K/1/``, whose
    metrics.json combines its rounds (checked against its overrides where it is one job's)."""
    folder = sweep_dir / trial["folder"]
    own = None if "/" in trial["folder"] else list(trial["overrides"])
    return Job(int(trial["num"]), folder, list(trial["overrides"]), vetted(folder, own, ("report.repeats",)),
               full="/" in trial["folder"])


def race_job(sweep_dir: Path, record, num: int) -> Job:
    """A raced configuration: its folder ``<folder>N/``, whose metrics.json combines its rounds."""
    folder = sweep_dir / f"{record.folder}{num}"
    return Job(num, folder, list(record.combos[num]), vetted(folder), full=bool(record.folder))


def halving_jobs(sweep_dir: Path, record) -> List[Job]:
    """A halving sweep's jobs, one per grid combination: its full run (``N/``) if it had one, else its
    last probe (``probe-R/N/``), marked pruned; a combination not reached yet is missing."""
    from fastpipe.sweeps.halving.plan import probe_folder

    if record.settings.get("mode") == "time_to_target":
        return target_halving_jobs(sweep_dir, record)
    jobs = []
    for num, overrides in enumerate(record.combos):
        last = record.last_round(num)
        probe_dir = sweep_dir / probe_folder(last["round"]) / str(num) if last else None
        probe = vetted(probe_dir, list(overrides), record.probe_keys) if probe_dir is not None else None
        if num in record.finals or last is None or num in (last.get("kept") or []):
            job_dir = sweep_dir / str(num)
            jobs.append(Job(num, job_dir, list(overrides), vetted(job_dir, list(overrides), record.probe_keys),
                            probe=probe, full=True))
            continue
        rates = last.get("throughput") or {}
        rate = rates.get(str(num))
        note = (f"dropped in round {last['round']}: "
                + beaten(rate, last["cutoff"], last.get("kept") or [], rates, ",.1f", "slower than", "slowest",
                         unit=f" samples/s after {last['steps']} steady-state steps")
                if rate is not None and last.get("cutoff") is not None else f"dropped in round {last['round']}")
        jobs.append(Job(num, probe_dir, list(overrides), probe, pruned_round=last["round"], probe=probe, note=note))
    return jobs


def target_halving_jobs(sweep_dir: Path, record) -> List[Job]:
    """A time-to-target halving sweep's jobs: every combination in its own folder ``N/``; one dropped
    in a round is pruned, with the round's reason."""
    jobs = []
    for num, overrides in enumerate(record.combos):
        metrics = vetted(sweep_dir / str(num), list(overrides), record.probe_keys)
        dropped = next((r for r in record.rounds if num in (r.get("dropped") or [])), None)
        if dropped is None:
            jobs.append(Job(num, sweep_dir / str(num), list(overrides), metrics, full=True))
            continue
        if dropped.get("reached"):
            note = (f"dropped in round {dropped['round']}: still short of the target at {dropped['budget_s']:,.1f} s, "
                    f"when job(s) {', '.join(map(str, dropped['reached']))} had reached it")
        else:
            values = dropped.get("values") or {}
            note = (f"dropped in round {dropped['round']} at {dropped['budget_s']:,.1f} s of training: best primary metric "
                    + beaten(values.get(str(num)), dropped.get("cutoff"), dropped.get("kept") or [], values, ".4g",
                             "worse than", "worst"))  # "below" would read backwards for a loss
        jobs.append(Job(num, sweep_dir / str(num), list(overrides), metrics, pruned_round=dropped["round"],
                        probe=metrics, note=note))
    return jobs


def beaten(value, cutoff, kept: List[int], values: Dict[str, Optional[float]], fmt: str, worse: str, end: str,
           unit: str = "") -> str:
    """Why a measured combination was dropped: ``worse`` than the N kept, or tied with the last one kept,
    which is never "below" it: halving's select and judge break ties by job number."""
    a, b = columns.num(value, fmt), columns.num(cutoff, fmt)
    if value == cutoff:
        last = next((j for j in reversed(kept) if values.get(str(j)) == cutoff), None)
        who = "" if last is None else f"job {last}, "
        return f"{a}{unit}, tied with the {end} of the {len(kept)} kept ({who}{b}); ties go to the lower job number"
    if a == b:  # apart, yet the same when printed short: print both in full
        a, b = columns.num(value, ".10g"), columns.num(cutoff, ".10g")
    return f"{a}{unit}, {worse} the {len(kept)} kept ({end} kept {b})"
