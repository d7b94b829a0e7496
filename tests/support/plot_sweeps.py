"""Sweep folders of made-up jobs for the plot tests: the +sweep=target grid (batch x lr x label smoothing x
EMA) cut to 4 jobs or widened to 40, each job with a target curve, and a race of stub jobs."""
from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

from omegaconf import OmegaConf

from fastpipe.report.sweep_folder import SweepSpec

GRIDS = {4: {"train.batch_size": ["64", "128"], "optimizer.lr": ["0.003", "0.01"]},
         8: {"train.batch_size": ["64", "128"], "optimizer.lr": ["0.003", "0.01"], "train.ema_decay": ["null", "0.99"]},
         16: {"train.batch_size": ["64", "128"], "optimizer.lr": ["0.003", "0.01"],
              "+task.label_smoothing": ["0.0", "0.1"], "train.ema_decay": ["null", "0.99"]},
         40: {"train.batch_size": ["64", "128"], "optimizer.lr": ["0.001", "0.003", "0.01", "0.03", "0.1"],
              "+task.label_smoothing": ["0.0", "0.1"], "train.ema_decay": ["null", "0.99"]}}
SETTINGS = ["+sweep=target", "train.target=0.95", "train.eval_every=10"]


def curve(seconds: float, reached: bool, best: float):
    """Evaluations every 10 steps rising towards ``best`` (0.951 when reached) by ``seconds``."""
    top = 0.951 if reached else best
    return [{"step": 10 * k, "seconds": seconds * k / 8, "value": top - (top - 0.3) * math.exp(-k / 2.5) * (k < 8),
             "subset": False} for k in range(1, 9)]


def job_metrics(num: int, overrides, throughput: float, seconds: float, reached: bool, failed: bool = False):
    if failed:
        return {"status": "failed", "reason": "CUDA out of memory while training step 12 (batch 128): lower "
                "train.batch_size or use precision=amp; the traceback is in metrics.json", "overrides": overrides,
                "choices": {"compile": "off"}, "warnings": []}
    best = 0.951 if reached else 0.80 + 0.01 * (num % 10)
    return {"status": "ok", "throughput": throughput, "overrides": overrides, "choices": {"compile": "off"},
            "primary_metric": {"name": "accuracy", "value": best, "higher_is_better": True}, "accuracy": best,
            "steps": 80, "warnings": [], "env": {"host": "h", "device": "cpu"}, "compile_cache": None,
            "target": {"metric": "accuracy", "value": 0.95, "higher_is_better": True, "reached": reached,
                       "seconds": seconds, "seconds_end_to_end": seconds + 5.0, "steps": 80, "samples": 5120,
                       "best_value": best, "eval_every": 10, "eval_samples": None,
                       "curve": curve(seconds, reached, best)}}


def write_job(folder: Path, num: int, overrides, metrics) -> None:
    (folder / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(overrides), folder / ".hydra" / "overrides.yaml")
    OmegaConf.save(OmegaConf.create({"hydra": {"job": {"num": num}}}), folder / ".hydra" / "hydra.yaml")
    (folder / "metrics.json").write_text(json.dumps(metrics))


def target_sweep(root: Path, n: int, objective: str = "time_to_target") -> SweepSpec:
    """A sweep of ``n`` jobs (4, 8, 16 or 40): job 1 never reaches the target although it is the fastest per
    sample (its bar outgrew the baseline's when bars were throughput), the last job failed."""
    grid = GRIDS[n]
    for num, values in enumerate(itertools.product(*grid.values())):
        overrides = [f"{k}={v}" for k, v in zip(grid, values)] + SETTINGS
        throughput = 3000.0 if num == 1 else 1000.0 + 37.0 * ((num * 7) % 11)
        seconds = 20.0 + 3.0 * ((num * 5) % 13)
        write_job(root / str(num), num, overrides, job_metrics(num, overrides, throughput, seconds, num != 1,
                                                               failed=num == n - 1))
    return SweepSpec(task_overrides=[f"{k}={','.join(v)}" for k, v in grid.items()] + SETTINGS, objective=objective)


def race_sweep(root: Path, n: int) -> SweepSpec:
    """``target_sweep``'s jobs raced (hydra/sweeper=race, 5 or 6 seeds) by stub runs that write each round's
    metrics.json without training: every fourth job never reaches the target (missed, then capped), the
    others are close; job 2 fails in round 1. race.json and the combined N/metrics.json are the race's."""
    from fastpipe.record import results
    from fastpipe.record.run_record import RunRecord
    from fastpipe.sweeps.race.rounds import RaceSettings
    from fastpipe.sweeps.race.run import new_record, run_race

    spec = target_sweep(root, n)

    def launch(batch, stage):
        for overrides in batch:
            values = dict(o.split("=", 1) for o in overrides)
            folder, seed = values["hydra.sweep.subdir"], int(values["seed"])
            num, cap = int(folder.split("/")[0]), float(values.get("train.time_budget_s", "inf"))
            seconds = None if num % 4 == 3 else 10.0 + 1.5 * (num % 4) + 0.8 * ((num * 3 + seed) % 5)
            reached = seconds is not None and seconds <= cap
            record = (RunRecord(status="failed", reason="CUDA out of memory") if (num, seed) == (2, 1) else
                      RunRecord(status="ok", throughput=100.0,
                                stopped_by="target" if reached else "time_budget" if cap < 50.0 else None,
                                target={"value": 0.95, "metric": "accuracy", "reached": reached,
                                        "seconds": seconds if reached else min(cap, 50.0), "seconds_end_to_end": 60.0,
                                        "higher_is_better": True,
                                        "best_value": 0.951 if reached else 0.5, "steps": 80, "samples": 5120}))
            (root / folder).mkdir(parents=True)
            results.write(root / folder, record)

    settings = RaceSettings(min_rounds=5, max_rounds=6)
    run_race(launch, new_record([[f"optimizer.lr={j}"] for j in range(n)], 0, 0, settings, "training", 1),
             settings, root, "training")
    return spec
