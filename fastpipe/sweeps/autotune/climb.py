"""The climb: probe, propose, try, keep what wins beyond the noise, probe again (docs/autotune.md).

Every trial is a sweep job in a numbered folder (0: the project's configuration as given, the baseline),
launched through the sweep's launcher. By throughput a trial is one job of ``report.repeats=repeats``
runs, and a candidate wins when its slowest run beats the current best's fastest (the report's rule for
repeats: their ranges apart), or with one run each when its lead is more than twice their combined
uncertainty (fastpipe/measure/noise.py, as the report's). By time to target a candidate is raced against the current best
(hydra/sweeper=race's test, its settings nested as ``hydra.sweeper.race``) and wins when the race names
it. A candidate that fails, or whose held-out metric falls more than ``report.parity_tol`` short of the
baseline's, is recorded and skipped. Under ``sweep.resume=true`` the same climb runs again: each job
that finished ok is read back, not rerun, so the decisions come out as they did and the first unfinished
trial goes on. ``autotune.json`` is rewritten after every trial.
"""
from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from fastpipe.errors import ConfigError
from fastpipe.record import results
from fastpipe.record.overrides import override_key
from fastpipe.record.results import write_json_atomic
from fastpipe.measure.noise import parity, uncertainty
from fastpipe.sweeps.autotune.bounds import classify
from fastpipe.sweeps.autotune.candidates import Candidate, catalogue, propose
from fastpipe.sweeps.autotune.record import FILE, VERSION

log = logging.getLogger(__name__)

Launch = Callable[[List[List[str]], str], object]  # (batch of jobs' overrides, what the batch is) -> anything
Values = Callable[[List[str], List[str]], Dict[str, str]]  # (overrides, keys) -> each key's composed value
OBJECTIVES = ("throughput", "time_to_target")


def check_start(combos: List[List[str]], configs: list) -> str:
    """The objective of an autotune over ``combos`` (the sweep's grid, composed as ``configs``), or one line
    (ConfigError) for a start it cannot climb from: lists, repeats or seeds of its own, another objective."""
    if len(combos) != 1:
        raise ConfigError(f"hydra/sweeper=autotune starts from one configuration, and the command line gives "
                          f"{len(combos)} (a list such as compile=off,default): give the project's configuration "
                          "alone; hydra.sweeper.space limits what it tries")
    config = configs[0]
    objective = str(config.report.objective)
    if objective not in OBJECTIVES:
        raise ConfigError(f"hydra/sweeper=autotune climbs by throughput or time_to_target, not report.objective="
                          f"{objective}: set report.objective=throughput (the default) or time_to_target")
    if objective == "time_to_target" and config.train.target is None:
        raise ConfigError("report.objective=time_to_target needs train.target (and train.eval_every): the value of "
                          "the task's primary metric to reach")
    if int(config.report.repeats) != 1:
        raise ConfigError("report.repeats inside hydra/sweeper=autotune: it runs each trial hydra.sweeper.repeats "
                          "times itself; drop report.repeats")
    return objective


@dataclass
class AutotuneSettings:
    """``hydra.sweeper.*`` of hydra/sweeper=autotune."""

    repeats: int = 3
    max_wall_s: Optional[float] = None
    max_trials: int = 20
    space: Optional[Dict[str, str]] = None
    fixed: Sequence[str] = ()
    race: Dict[str, object] = field(default_factory=dict)

    def check(self, objective: str = "throughput") -> None:
        """One line (ConfigError) for a setting the climb cannot use, before any job runs."""
        if self.repeats < 1:
            raise ConfigError(f"hydra.sweeper.repeats={self.repeats} must be >= 1 (runs of each trial, by throughput; "
                              "3 lets a change win only when its runs all beat the current best's)")
        if self.max_trials < 1:
            raise ConfigError(f"hydra.sweeper.max_trials={self.max_trials} must be >= 1 (jobs at most, the baseline's "
                              "included)")
        if self.max_wall_s is not None and not self.max_wall_s > 0:
            raise ConfigError(f"hydra.sweeper.max_wall_s={self.max_wall_s} must be > 0 seconds, or null")
        for device in ("cpu", "cuda"):
            catalogue(device, self.space)  # a choice the space names that is not registered: one line now
        if objective == "time_to_target":
            self.race_settings().check(2)

    def race_settings(self):
        """``hydra.sweeper.race`` as the race's settings; one line naming an unknown key."""
        from dataclasses import fields

        from fastpipe.sweeps.race.rounds import RaceSettings

        known = [f.name for f in fields(RaceSettings)]
        unknown = sorted(set(self.race) - set(known))
        if unknown:
            raise ConfigError(f"hydra.sweeper.race: {', '.join(unknown)} is not a setting of the race; use "
                              f"{', '.join(known)}")
        return RaceSettings(**self.race)


def with_change(overrides: Sequence[str], change: str) -> List[str]:
    """``overrides`` with ``change`` (key=value) in place of any override of the same key."""
    key = override_key(change)  # +key, ++key and ~key name the same key
    return [o for o in overrides if override_key(o) != key] + [change]


@dataclass
class Climb:
    """One autotune's state: the trials so far and the path it took (``record()`` is autotune.json)."""

    project: List[str]
    objective: str
    settings: AutotuneSettings
    sweep_dir: Path
    launch: Launch
    values: Values
    clock: str = "training"
    parity_tol: float = 0.01
    seed: int = 0  # a race's first seed
    noise_floor: float = 0.04  # report.noise_floor: a one-run trial's run-to-run uncertainty
    machinery: List[str] = field(default_factory=list)  # sweep.* overrides: every job gets them, no trial records them
    trials: List[dict] = field(default_factory=list)  # {num, folder, overrides, metrics}
    steps: List[dict] = field(default_factory=list)
    stopped_by: Optional[str] = None
    started: float = field(default_factory=time.time)
    raced_base: Optional[dict] = None  # by time to target: the baseline's rounds in the first race

    # ---------------------------------------------------------------- the loop
    def run(self) -> dict:
        best = self.trial(list(self.project), "the baseline")
        base = best
        self.write(base, best)
        measured = best["metrics"].get("status") == "ok" and (
            self.objective != "throughput" or best["metrics"].get("throughput") is not None)
        if not measured:  # nothing to climb from
            self.stopped_by = "baseline_failed"
            return self.write(base, best)
        device = str((best["metrics"].get("env") or {}).get("device") or "cpu").split(":")[0]
        everything = catalogue(device, self.settings.space)
        keys = list(dict.fromkeys(["data", *(c.key for c in everything)]))
        while True:
            probe = classify(best["metrics"])
            step = {"probe": dict(probe.record(), trial=best["num"], overrides=best["overrides"]), "candidates": [],
                    "kept": None}
            self.steps.append(step)
            self.write(base, best)
            log.info(f"Autotune probe of trial {best['num']}: bound by {probe.describe()}")
            # never again: a change that failed or broke the held-out metric, or one that leads to a
            # configuration already run (no ping-pong between two values on noise)
            broke = {c["change"] for s in self.steps for c in s["candidates"] if c["result"] in ("failed", "parity")}
            visited = {tuple(sorted(t["overrides"])) for t in self.trials}
            candidates = [c for c in propose(probe.bound, probe.headroom, self.values(best["overrides"], keys),
                                             everything, self.settings.fixed, broke)
                          if tuple(sorted(with_change(best["overrides"], c.override))) not in visited]
            kept = None
            for candidate in candidates:
                if self.out_of_budget():
                    break
                outcome = self.try_candidate(candidate, best, base)
                step["candidates"].append(outcome)
                self.write(base, best)
                if outcome["result"] == "won":
                    kept = outcome
                    break
            if kept is None:
                self.stopped_by = self.stopped_by or "no_candidate_won"
                return self.write(base, best)
            step["kept"] = kept["change"]
            best = next(t for t in self.trials if t["num"] == kept["trial"])
            log.info(f"Autotune keeps {kept['change']} (trial {best['num']}): {kept['evidence'].get('text', '')}")

    def out_of_budget(self) -> bool:
        """Whether ``max_trials`` or ``max_wall_s`` is spent (``stopped_by`` says which)."""
        if len(self.trials) >= self.settings.max_trials:
            self.stopped_by = "max_trials"
        elif self.settings.max_wall_s is not None and time.time() - self.started >= self.settings.max_wall_s:
            self.stopped_by = "max_wall_s"
        return self.stopped_by is not None

    # ---------------------------------------------------------------- one trial
    def launch_jobs(self, batch: List[List[str]], stage: str) -> None:
        """Launch ``batch``; a job trained in this process (launcher.fresh_process=false) whose code raised
        has written its failed metrics.json, which the climb reads like any other: the error is logged,
        not the end of the sweep (a stop signal still is: SystemExit is no Exception)."""
        try:
            self.launch(batch, stage)
        except Exception as exc:  # noqa: BLE001 (a project's bug in one candidate: recorded, not fatal)
            log.warning(f"Autotune: {stage} raised {type(exc).__name__}: {exc}")

    def trial(self, overrides: List[str], what: str) -> dict:
        """One job in the next numbered folder: ``overrides`` (with the repeats, by throughput)."""
        num = len(self.trials)
        extra = [f"report.repeats={self.settings.repeats}"] if self.objective == "throughput" else []
        self.launch_jobs([[*overrides, *extra, *self.machinery, f"hydra.sweep.subdir={num}"]], f"trial {num} ({what})")
        metrics = results.read(self.sweep_dir / str(num))
        entry = {"num": num, "folder": str(num), "overrides": list(overrides),
                 "metrics": metrics if isinstance(metrics, dict) else {"status": "failed", "reason": "no metrics.json"}}
        self.trials.append(entry)
        return entry

    def try_candidate(self, candidate: Candidate, best: dict, base: dict) -> dict:
        """Run ``candidate`` from ``best``; the outcome: won, lost, failed or parity (its held-out metric)."""
        overrides = with_change(best["overrides"], candidate.override)
        outcome = {"change": candidate.override, "relieves": list(candidate.relieves), "overrides": overrides}
        if self.objective == "time_to_target":
            return dict(outcome, **self._raced(overrides, best, base))
        tried = self.trial(overrides, candidate.override)
        outcome["trial"] = tried["num"]
        m = tried["metrics"]
        if m.get("status") != "ok":
            return dict(outcome, result="failed", evidence={"text": m.get("reason") or m.get("status")})
        held = self._parity(m, base["metrics"])
        if held is not None:
            return dict(outcome, result="parity", evidence={"text": held})
        return dict(outcome, **compare(m, best["metrics"], self.noise_floor))

    def _parity(self, m: dict, base: dict) -> Optional[str]:
        mine, theirs = m.get("primary_metric") or {}, base.get("primary_metric") or {}
        verdict = parity(mine.get("value"), theirs.get("value"), self.parity_tol, theirs.get("higher_is_better", True))
        if verdict != "FAIL":
            return None
        return (f"held-out {mine.get('name')} {mine.get('value'):.4g} against the baseline's {theirs.get('value'):.4g}: "
                f"worse by more than report.parity_tol={self.parity_tol:g}")

    def _raced(self, overrides: List[str], best: dict, base: dict) -> dict:
        """Race ``overrides`` against the current best over seeds (hydra/sweeper=race's rounds and test)."""
        from fastpipe.sweeps.race.rounds import FILE as RACE_FILE
        from fastpipe.sweeps.race.run import new_record, run_race

        k = sum(len(s["candidates"]) for s in self.steps)
        folder = f"race-{k}/"
        race = self.settings.race_settings()
        record = new_record([best["overrides"], overrides], self.seed, 0, race, self.clock, 1, folder=folder)
        # race.json is written at the sweep's root while the race runs (the report reads an autotune's folder
        # by autotune.json, never by it), then kept in the race's own folder
        run_race(self.launch_jobs, record, race, self.sweep_dir, self.clock, extra=self.machinery)
        (self.sweep_dir / RACE_FILE).replace(self.sweep_dir / folder / RACE_FILE)
        if self.raced_base is None:  # the first race: the baseline over its seeds, the speed-up's denominator
            self.raced_base = results.read(self.sweep_dir / f"{folder}0")
        entry = {"num": len(self.trials), "folder": f"{folder}1", "overrides": list(overrides),
                 "metrics": results.read(self.sweep_dir / f"{folder}1") or {"status": "failed"}}
        self.trials.append(entry)
        said = {"text": f"race {folder}: " + ("won" if record.winner == 1 else "the current best won"
                                              if record.winner == 0 else f"no winner ({record.stopped_by})"),
                "winner": record.winner, "rounds": len(record.rounds)}
        out = record.eliminated.get("1")
        if out is not None and out.get("p") is None:  # it failed in a round
            return {"trial": entry["num"], "result": "failed", "evidence": dict(said, text=f"race {folder}: failed in "
                                                                                    f"round {out['round']}")}
        if record.winner == 1:
            held = self._parity(entry["metrics"], base["metrics"])
            if held is not None:
                return {"trial": entry["num"], "result": "parity", "evidence": dict(said, text=held)}
        return {"trial": entry["num"], "result": "won" if record.winner == 1 else "lost", "evidence": said}

    # ---------------------------------------------------------------- autotune.json
    def write(self, base: dict, best: dict) -> dict:
        record = {"version": VERSION, "objective": self.objective, "project": self.project,
                  "settings": {"repeats": self.settings.repeats, "max_wall_s": self.settings.max_wall_s,
                               "max_trials": self.settings.max_trials, "space": self.settings.space,
                               "fixed": list(self.settings.fixed)},
                  "trials": [{k: t[k] for k in ("num", "folder", "overrides")} for t in self.trials],
                  "steps": self.steps, "final": {"trial": best["num"], "overrides": best["overrides"]},
                  "speedup": speedup(self.raced_base or base["metrics"] if self.objective == "time_to_target" else
                                     base["metrics"], best["metrics"], self.objective, self.clock),
                  "stopped_by": self.stopped_by,
                  "wall_s": round(time.time() - self.started, 1)}
        write_json_atomic(self.sweep_dir / FILE, record)
        return record


def _runs(m: dict) -> List[float]:
    """A trial's throughputs: each repeat's, else its one."""
    listed = [t for t in ((m.get("repeats") or {}).get("throughput") or []) if t is not None]
    return listed or ([m["throughput"]] if m.get("throughput") is not None else [])


def _row(m: dict) -> dict:
    """The fields measure/noise.py's uncertainty reads (a report row's names), from a metrics.json."""
    steps = m.get("step_time_ms") or {}
    return {"step_time_median_ms": steps.get("median"), "step_time_spread_ms": steps.get("spread"),
            "step_windows": steps.get("windows")}


def compare(m: dict, best: dict, noise_floor: float = 0.04) -> dict:
    """Whether trial ``m`` beats ``best`` by throughput beyond the noise: {result, evidence}."""
    mine, theirs = _runs(m), _runs(best)
    if not mine or not theirs:
        return {"result": "failed", "evidence": {"text": "no throughput measured"}}
    ratio = statistics.median(mine) / statistics.median(theirs)
    evidence = {"throughput": mine, "against": theirs, "ratio": round(ratio, 4)}
    if len(mine) > 1 and len(theirs) > 1:
        won = min(mine) > max(theirs)
        evidence["text"] = (f"{ratio:.2f}x: its {len(mine)} runs " + ("all beat" if won else "do not all beat")
                            + f" the current best's {len(theirs)} ({min(mine):.1f}-{max(mine):.1f} against "
                              f"{min(theirs):.1f}-{max(theirs):.1f} samples/s)")
        return {"result": "won" if won else "lost", "evidence": evidence}
    both = (uncertainty(_row(m), noise_floor) ** 2 + uncertainty(_row(best), noise_floor) ** 2) ** 0.5
    won = ratio - 1.0 > 2.0 * both
    evidence["text"] = (f"{ratio:.2f}x with one run each, uncertain by ±{100 * both:.1f} %: "
                        + ("more than twice the noise" if won else "within twice the noise"))
    return {"result": "won" if won else "lost", "evidence": evidence}


def speedup(base: dict, final: dict, objective: str, clock: str = "training") -> Optional[dict]:
    """The final configuration against the baseline: ``{value, low, high}`` (throughput: the median ratio, and
    the ratio of the runs' extremes; time to target: the baseline's median time over the final's, both over
    the first race's seeds, on ``clock``)."""
    if objective == "time_to_target":
        key = "seconds_end_to_end" if clock == "end_to_end" else "seconds"
        mine, theirs = ((m.get("target") or {}).get(key) if (m.get("target") or {}).get("reached") else None
                        for m in (final, base))
        return {"value": round(theirs / mine, 4), "low": None, "high": None} if mine and theirs else None
    mine, theirs = _runs(final), _runs(base)
    if not mine or not theirs:
        return None
    return {"value": round(statistics.median(mine) / statistics.median(theirs), 4),
            "low": round(min(mine) / max(theirs), 4), "high": round(max(mine) / min(theirs), 4)}
