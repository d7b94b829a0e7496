"""The throughput report's warm-up column names each compiled job's Inductor cache state (metrics.json's
compile_cache), so a sweep's warm-up seconds say whether they paid for compilation (issue 27)."""
from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

from fastpipe.report.publish import write_report
from fastpipe.report.sweep_folder import SweepSpec

CACHE = {"cold": {"fx_graph": {"hit": 0, "miss": 2, "bypass": 0}, "state": "cold"},
         "warm": {"fx_graph": {"hit": 2, "miss": 0, "bypass": 0}, "state": "warm"}, "off": None}


def job(folder: Path, num: int, compile_choice: str, state: str, warmup: float) -> None:
    overrides = [f"compile={compile_choice}", f"seed={num}"]
    (folder / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(overrides), folder / ".hydra" / "overrides.yaml")
    OmegaConf.save(OmegaConf.create({"hydra": {"job": {"num": num}}}), folder / ".hydra" / "hydra.yaml")
    m = {"status": "ok", "throughput": 100.0 + num, "overrides": overrides, "choices": {"compile": compile_choice},
         "warmup_s": warmup, "steps": 50, "warnings": [], "env": {"host": "h", "device": "cpu"},
         "compile_cache": CACHE[state]}
    (folder / "metrics.json").write_text(json.dumps(m))


def test_the_warm_up_cell_says_cold_or_warm_for_compiled_jobs_only(tmp_path):
    for num, (choice, state, warmup) in enumerate([("off", "off", 0.5), ("default", "cold", 41.0),
                                                    ("default", "warm", 6.0)]):
        job(tmp_path / str(num), num, choice, state, warmup)
    write_report(tmp_path, SweepSpec(task_overrides=["compile=off,default,default", "seed=0,1,2"]))
    md = (tmp_path / "report.md").read_text()
    lines = {line.split(" | ")[0]: line for line in md.splitlines() if line.startswith("| ") and "---" not in line}
    assert "| 41.00 (cold) |" in lines["| 1"] and "| 6.00 (warm) |" in lines["| 2"]
    assert "| 0.50 |" in lines["| 0 (baseline)"]
    assert "(cold) every graph compiled, (warm) every one from the cache" in md
