"""A real halving sweep: it prunes, keeps the baseline and runs the finalists in full."""
from __future__ import annotations

import csv
import json
from pathlib import Path

from fastpipe.sweeps.halving.plan import read

from conftest import TINY, run_sweep


def read_csv(path: Path):
    with open(path) as fh:
        return {int(r["job"]): r for r in csv.DictReader(fh)}


def test_halving_sweep_prunes_keeps_the_baseline_and_runs_the_finalists_in_full(tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = run_sweep(sweep_dir, ["hydra/sweeper=halving", "hydra.sweeper.probe_steps=3", "hydra.sweeper.keep=0.3",
                                "hydra.sweeper.finalists=1", "precision=fp32,amp", "optimizer=adamw,sgd",
                                "launcher.fresh_process=false"] + TINY)  # in-process: quicker jobs
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = read(sweep_dir)
    assert record.baseline == 0 and record.finals[0] == 0 and len(record.finals) == 2  # baseline + 1 finalist
    assert record.rounds[0]["jobs"] == [1, 2, 3] and len(record.rounds) == 1
    rows = read_csv(sweep_dir / "report.csv")
    pruned = [n for n, r in rows.items() if r["status"] == "pruned"]
    assert len(pruned) == 2 and all(rows[n]["round"] == "1" for n in pruned)
    for n in record.finals:  # full length (TINY's 12 steps), in the grid's folder N/
        m = json.loads((sweep_dir / str(n) / "metrics.json").read_text())
        assert m["status"] == "ok" and m["steps"] == 12 and rows[n]["stage"] == "full"
    for n in (1, 2, 3):  # every other combination probed: warm-up 2 + 3 steady-state steps
        assert json.loads((sweep_dir / "probe-1" / str(n) / "metrics.json").read_text())["steps"] == 5
    named = [n for n, r in rows.items() if r["best"] == "True"]  # one run each: a winner only beyond the noise
    assert all(n in record.finals and rows[n]["parity"] != "FAIL" for n in named)
    md = (sweep_dir / "report.md").read_text()
    assert "- halving: 4 combinations" in md and (named or "- too close to call:" in md)
    assert (sweep_dir / "best.yaml").is_file() == bool(named)
