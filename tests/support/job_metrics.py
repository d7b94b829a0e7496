"""A sweep job's metrics.json as the report, repeats and halving code read it: made-up numbers for
the in-process tests of those (tests/unit/report, launch, sweeps)."""
from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf


def job_metrics(throughput=100.0, accuracy=0.9, status="ok", **extra) -> dict:
    """One job's metrics: ``status`` ok (or failed, with a reason), the given throughput and accuracy,
    fixed timings and environment; ``extra`` keys added or replaced."""
    m = {"status": status, "reason": None if status == "ok" else "boom", "throughput": throughput,
         "accuracy": accuracy, "choices": {"precision": "fp32", "compile": "off"}, "overrides": [],
         "epoch_time_s": 1.0, "warmup_s": 0.5, "data_wait_frac": 0.1, "peak_mem_gb": 1.0, "gpu_util": None,
         "compile_fallback": None, "warnings": [], "env": {"torch": "x", "host": "h", "device": "cpu"}}
    m.update(extra)
    return m


def halving_job(throughput, accuracy=0.9, steps=12, **extra) -> dict:
    """A finished job as a halving round reads it: its primary metric (accuracy), steps and median step
    time (batches of 16)."""
    step_ms = None if throughput is None else 1000.0 * 16 / throughput
    return job_metrics(throughput, accuracy, **{
        "primary_metric": {"name": "accuracy", "value": accuracy, "higher_is_better": True},
        "steps": steps, "step_time_ms": {"median": step_ms, "p90": None}, **extra})


def make_sweep(root: Path, jobs, task=("precision=fp32,amp", "compile=off,default"), report=None):
    """A sweep folder as Hydra + fastpipe leave it: multirun.yaml and N/{.hydra, metrics.json}."""
    root.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create({"hydra": {"overrides": {"task": list(task)}, "sweeper": {"params": None}},
                                     "report": report or {"baseline": None, "parity_tol": 0.01}}),
                   root / "multirun.yaml")
    for num, (overrides, m) in enumerate(jobs):
        d = root / str(num)
        (d / ".hydra").mkdir(parents=True)
        OmegaConf.save(OmegaConf.create(list(overrides)), d / ".hydra" / "overrides.yaml")
        OmegaConf.save(OmegaConf.create({"hydra": {"job": {"num": num}}}), d / ".hydra" / "hydra.yaml")
        if m is not None:
            m = dict(m, overrides=list(overrides))
            m["choices"] = dict(m["choices"], **{o.split("=")[0]: o.split("=")[1] for o in overrides})
            (d / "metrics.json").write_text(json.dumps(m))
    return root
