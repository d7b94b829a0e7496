"""Where and how long each job ran, and what a halving sweep saved against the full grid.

- ``launcher.json`` (written by ``hydra/launcher=gpus`` into each job folder): the job's GPUs
  (``CUDA_VISIBLE_DEVICES``), cores, start and end: the report's ``gpus`` column.
- A job's wall time: the launcher's start and end when it has them, else from the job's Hydra record
  (``.hydra/hydra.yaml``, written as the job starts) to its ``metrics.json`` (written as it ends).
- A halving sweep's saving: the full grid's job time is the full runs' measured times plus, for every
  combination that only probed, an estimate from its last probe: the probe's own wall time (start-up,
  data, compilation and warm-up, once) plus the steps a full run has beyond the probe's at the probe's
  steady step time. The full runs' length is the baseline's (or another full run's) ``steps``, scaled
  by batch size where metrics.json records it. Every finalist was probed too, so the estimate is
  checked against its measured full run, and the report says by how much it missed.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional

from fastpipe.record import results


def launcher_info(job_dir: Path) -> Optional[dict]:
    """The ``gpus`` launcher's record of a job (its slot's GPUs and cores, start and end), or None."""
    try:
        return json.loads((Path(job_dir) / "launcher.json").read_text())
    except (OSError, ValueError):
        return None


def gpus_text(info: Optional[dict], env: Optional[dict] = None) -> Optional[str]:
    """The report's ``gpus`` cell: the GPUs the ``gpus`` launcher gave the job (``0``, ``2,3``; ``cpu``
    for none); else, for a one-process CUDA job, the GPU its environment record names (its entry of
    ``visible_devices`` when recorded, else its device index); None when nothing says."""
    if info is not None:
        return ",".join(str(g) for g in info.get("gpus") or []) or "cpu"
    device = str((env or {}).get("device") or "")
    if not device.startswith("cuda") or int(env.get("world_size") or 1) != 1:
        return None
    index = int(device.split(":")[1]) if ":" in device else 0
    visible = [e.strip() for e in str(env.get("visible_devices") or "").split(",") if e.strip()]
    return visible[index] if index < len(visible) else str(index)


def cores_text(info: Optional[dict]) -> Optional[str]:
    """The cores a ``gpus``-launched job ran on, ``0-3``."""
    from fastpipe.sweeps.slots import core_ranges

    return None if info is None or not info.get("cpus") else core_ranges(info["cpus"])


def job_seconds(job_dir: Path, info: Optional[dict] = None) -> Optional[float]:
    """A job's wall time (see the module docstring), or None when its files do not tell."""
    if info and info.get("started") and info.get("ended"):
        return float(info["ended"]) - float(info["started"])
    try:
        start = (Path(job_dir) / ".hydra" / "hydra.yaml").stat().st_mtime
        end = (Path(job_dir) / results.FILE).stat().st_mtime
    except OSError:
        return None
    return end - start if end >= start else None  # a resumed job rewrote .hydra/ but kept its results


def full_length_estimate(probe: Optional[dict], probe_s: Optional[float], ref: Optional[dict]) -> Optional[float]:
    """A full run's wall time from its probe (see the module docstring); a failed probe's own time
    (the full run would have failed the same way); None when the numbers are not there."""
    if probe_s is None or not isinstance(probe, dict):
        return None
    if probe.get("status") != "ok":
        return probe_s
    step_ms = (probe.get("step_time_ms") or {}).get("median")
    if ref is None or not ref.get("steps") or step_ms is None or probe.get("steps") is None:
        return None
    steps = float(ref["steps"])
    if ref.get("batch_size") and probe.get("batch_size"):
        steps *= float(ref["batch_size"]) / float(probe["batch_size"])
    return probe_s + max(0.0, steps - float(probe["steps"])) * step_ms / 1000.0


def summarize_to_target(record) -> dict:
    """A time-to-target halving sweep's rounds (budget, who ran, reached, kept, dropped) and wall times."""
    rounds = [{"round": r["round"], "budget_s": r.get("budget_s"), "probes": len(r.get("jobs") or []),
               "reached": len(r.get("reached") or []), "kept": len(r.get("kept") or []),
               "dropped": len(r.get("dropped") or []), "finished": len(r.get("finished") or []),
               "failed": len(r.get("failed") or []), "wall_s": _span(r.get("started"), r.get("ended"))}
              for r in record.rounds]
    return {"mode": "time_to_target", "combinations": len(record.combos), "baseline": record.baseline,
            "finals": list(record.finals), "rounds": rounds, "settings": dict(record.settings),
            "parallel": record.parallel, "wall_s": _span(record.started, record.ended),
            "finals_wall_s": _span(record.finals_started, record.finals_ended)}


def summarize(sweep_dir: Path, record, jobs: List, rows: List[dict]) -> dict:
    """A halving sweep's rounds and times, for report.md and report.csv."""
    from fastpipe.sweeps.halving.plan import probe_folder

    if record.settings.get("mode") == "time_to_target":
        return summarize_to_target(record)
    sweep_dir = Path(sweep_dir)
    probe_time: Dict[tuple, Optional[float]] = {}
    probes: Dict[tuple, Optional[dict]] = {}
    rounds = []
    for entry in record.rounds:
        spent = 0.0
        for n in entry.get("jobs", []):
            folder = sweep_dir / probe_folder(entry["round"]) / str(n)
            probes[(entry["round"], n)] = results.read(folder)
            probe_time[(entry["round"], n)] = job_seconds(folder, launcher_info(folder))
            spent += probe_time[(entry["round"], n)] or 0.0
        rounds.append({"round": entry["round"], "probes": len(entry.get("jobs", [])), "steps": entry.get("steps"),
                       "kept": len(entry.get("kept") or []), "dropped": len(entry.get("dropped") or []),
                       "failed": len(entry.get("failed") or []), "job_s": spent,
                       "wall_s": _span(entry.get("started"), entry.get("ended"))})
    full_time = {n: job_seconds(sweep_dir / str(n), launcher_info(sweep_dir / str(n))) for n in record.finals}
    full_metrics = {n: results.read(sweep_dir / str(n)) for n in record.finals}
    ref = next((full_metrics[n] for n in [record.baseline] + list(record.finals)
                if n in full_metrics and (full_metrics[n] or {}).get("status") == "ok"), None)
    grid, measured, estimated, missing, checks = 0.0, 0, 0, 0, []
    for n in range(len(record.combos)):
        last = record.last_round(n)
        key = (last["round"], n) if last else None
        if n in record.finals and full_time.get(n) is not None:
            grid += full_time[n]
            measured += 1
            guess = full_length_estimate(probes.get(key), probe_time.get(key), ref) if key else None
            if guess is not None and full_time[n] > 0:
                checks.append((guess - full_time[n]) / full_time[n])
            continue
        guess = full_length_estimate(probes.get(key), probe_time.get(key), ref) if key else None
        if guess is None:
            missing += 1
        else:
            grid += guess
            estimated += 1
    probe_s = sum(t for t in probe_time.values() if t is not None)
    full_s = sum(t for t in full_time.values() if t is not None)
    return {"combinations": len(record.combos), "baseline": record.baseline, "finals": list(record.finals),
            "rounds": rounds, "settings": dict(record.settings), "parallel": record.parallel,
            "wall_s": _span(record.started, record.ended), "probe_job_s": probe_s, "full_job_s": full_s,
            "job_s": probe_s + full_s, "grid_job_s": grid if not missing else None, "measured": measured,
            "estimated": estimated, "not_estimated": missing,
            "check_max_error": max(checks, key=abs) if checks else None, "checked": len(checks)}


def _span(start, end) -> Optional[float]:
    return None if start is None or end is None else float(end) - float(start)
