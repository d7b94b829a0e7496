"""hydra/sweeper=race from the command line: rounds of real jobs through hydra/launcher=gpus's two CPU lanes."""
from __future__ import annotations

import json

import pytest

from conftest import TINY, run_sweep

# three seeds can send one of two out only at alpha 0.4 (an exact two-sided sign test: p = 2/8 when one wins all)
RACE = ["hydra/sweeper=race", "hydra/launcher=gpus", "hydra.launcher.max_parallel=2", "hydra.sweeper.min_rounds=2",
        "hydra.sweeper.max_rounds=3", "hydra.sweeper.alpha=0.4", "hydra.sweeper.cap_after=1",
        "report.objective=time_to_target", "train.target=0.5", "train.eval_every=4",
        "optimizer.lr=0.01,0.00001"]  # each job trains in its lane's own process


@pytest.fixture(scope="module")
def raced(tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("race") / "sweep"
    proc = run_sweep(sweep_dir, [*RACE, *TINY, "train.max_steps=24"])  # the sweep here, its jobs in their lanes
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return sweep_dir, proc, json.loads((sweep_dir / "race.json").read_text())


def test_each_round_trains_every_job_with_the_rounds_seed_in_parallel_lanes(raced):
    sweep_dir, _, record = raced
    assert [(r["round"], r["seed"], r["jobs"]) for r in record["rounds"]] == [(0, 0, [0, 1]), (1, 1, [0, 1]),
                                                                             (2, 2, [0, 1])]
    for r in record["rounds"]:
        runs = [json.loads((sweep_dir / str(n) / f"round-{r['round']}" / "metrics.json").read_text()) for n in (0, 1)]
        assert all(f"seed={r['seed']}" in m["overrides"] for m in runs)
        info = [json.loads((sweep_dir / str(n) / f"round-{r['round']}" / "launcher.json").read_text()) for n in (0, 1)]
        assert sorted(tuple(i["cpus"]) for i in info) == [(0,), (1,)]  # one lane each
    assert record["rounds"][1]["cap_s"] == pytest.approx(2 * record["rounds"][0]["training_s"]["0"])
    # lr 1e-5 never reaches the target: job 0 wins the race exactly when it reached it on all three seeds
    swept = all(r["values"]["0"] is not None and r["values"]["1"] is None for r in record["rounds"])
    assert record["winner"] == 0 if swept else (record["stopped_by"] == "max_rounds" and sorted(record["tie"]) == [0, 1])
    combined = json.loads((sweep_dir / "0" / "metrics.json").read_text())
    assert combined["repeats"]["dirs"] == ["round-0", "round-1", "round-2"]
