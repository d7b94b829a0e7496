"""The report of a halving sweep: pruned rows, the winner among the full runs by the parity rule, time
against the grid; picking the best by the objective."""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path
import time

from omegaconf import OmegaConf
import pytest

from fastpipe.report.publish import write_report
from fastpipe.report.sweep_folder import SweepSpec
from fastpipe.sweeps.halving.plan import HalvingRecord, probe_folder
from job_metrics import halving_job as ok


# ------------------------------------------------------------------ the report of a halving sweep (fast)
COMBOS = [["precision=fp32", "compile=off"], ["precision=fp32", "compile=default"],
          ["precision=amp", "compile=off"], ["precision=amp", "compile=default"],
          ["precision=bf16x", "compile=off"]]


def job_folder(folder: Path, overrides, metrics, seconds: float) -> None:
    """A job folder as fastpipe leaves it, its Hydra record ``seconds`` older than its metrics."""
    (folder / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(list(overrides)), folder / ".hydra" / "overrides.yaml")
    OmegaConf.save(OmegaConf.create({"hydra": {"job": {"num": 99}}}), folder / ".hydra" / "hydra.yaml")
    m = dict(metrics, overrides=list(overrides))
    m["choices"] = dict(m["choices"], **{o.split("=")[0]: o.split("=")[1] for o in overrides if "max_steps" not in o})
    (folder / "metrics.json").write_text(json.dumps(m))
    now = time.time()
    os.utime(folder / ".hydra" / "hydra.yaml", (now - seconds, now - seconds))
    os.utime(folder / "metrics.json", (now, now))


@pytest.fixture
def halving_folder(tmp_path):
    """5 combinations: baseline 0 runs in full; round 1 probes 1-4 (4 fails), keeps 1, 2 and 3;
    round 2 keeps 2 and 3 (finalists=2), which run in full. Finalist 3 is the fastest but lost accuracy."""
    probe = lambda t: dict(ok(t, accuracy=0.3, steps=5), choices={"precision": "fp32", "compile": "off"})  # noqa: E731
    round1 = {1: probe(150.0), 2: probe(400.0), 3: probe(500.0), 4: {"status": "failed", "reason": "bf16x boom",
                                                                   "choices": {}, "steps": 1}}
    round2 = {1: probe(140.0), 2: probe(420.0), 3: probe(510.0)}
    for n, m in round1.items():
        job_folder(tmp_path / probe_folder(1) / str(n), COMBOS[n] + ["train.max_steps=7"], m, 4.0)
    for n, m in round2.items():
        job_folder(tmp_path / probe_folder(2) / str(n), COMBOS[n] + ["train.max_steps=12"], m, 5.0)
    finals = {0: ok(100.0, accuracy=0.90, steps=100), 2: ok(410.0, accuracy=0.895, steps=100),
              3: ok(520.0, accuracy=0.80, steps=100)}
    for n, m in finals.items():
        job_folder(tmp_path / str(n), COMBOS[n], m, 20.0)
    record = HalvingRecord(settings={"probe_steps": 5, "keep": 0.75, "finalists": 2}, combos=COMBOS, baseline=0,
                           probe_keys=["train.max_steps", "report.repeats"], started=time.time() - 60)
    record.rounds = [
        {"round": 1, "folder": "probe-1", "steps": 5, "jobs": [1, 2, 3, 4], "kept": [3, 2, 1], "dropped": [],
         "failed": [4], "cutoff": 150.0, "throughput": {"1": 150.0, "2": 400.0, "3": 500.0, "4": None},
         "started": 0.0, "ended": 1.0},
        {"round": 2, "folder": "probe-2", "steps": 10, "jobs": [1, 2, 3], "kept": [3, 2], "dropped": [1],
         "failed": [], "cutoff": 420.0, "throughput": {"1": 140.0, "2": 420.0, "3": 510.0},
         "started": 1.0, "ended": 2.0}]
    record.finals, record.ended = [0, 2, 3], time.time()
    record.write(tmp_path)
    OmegaConf.save(OmegaConf.create({"hydra": {"overrides": {"task": ["precision=fp32,amp,bf16x", "compile=off,default"]},
                                               "sweeper": {"params": None}},
                                     "report": {"baseline": None, "parity_tol": 0.01}}), tmp_path / "multirun.yaml")
    return tmp_path


def read_csv(path: Path):
    with open(path) as fh:
        return {int(r["job"]): r for r in csv.DictReader(fh)}


def test_halving_report_has_pruned_rows_and_picks_among_the_finalists_by_parity(halving_folder):
    result = write_report(halving_folder)
    rows = read_csv(halving_folder / "report.csv")
    assert sorted(rows) == [0, 1, 2, 3, 4]  # every combination is a row, pruned or not
    assert rows[1]["status"] == "pruned" and rows[1]["round"] == "2" and rows[1]["stage"] == "probe"
    assert float(rows[1]["throughput"]) == 140.0 and rows[1]["dir"].endswith("probe-2/1")
    assert "dropped in round 2" in rows[1]["reason"] and rows[1]["parity"] == "n/a"  # a probe's accuracy: not compared
    assert rows[4]["status"] == "failed" and rows[4]["reason"].startswith("probe (round 1): bf16x boom")
    assert [rows[n]["stage"] for n in (0, 2, 3)] == ["full"] * 3 and rows[0]["baseline"] == "True"
    assert float(rows[3]["probe_throughput"]) == 510.0  # a finalist keeps its last probe's number
    # finalist 3 is the fastest but lost 10 points of accuracy: the winner is finalist 2, as in a grid
    assert rows[3]["parity"] == "FAIL" and result.best["job"] == 2 and rows[2]["best"] == "True"
    assert "train.max_steps" not in result.columns and result.columns == ["precision", "compile"]
    md = (halving_folder / "report.md").read_text()
    assert "| halving |" in md and "| round 2 |" in md and "| full |" in md and md.count("| pruned: ") == 1
    assert "- halving: 5 combinations" in md and "round 1: 4 probe(s) of 5 steady-state steps, 3 kept, 1 failed" in md
    assert "→ this sweep's jobs took" in md
    assert (halving_folder / "report.png").read_bytes()[:4] == b"\x89PNG"
    assert 'override /precision: "amp"' in (halving_folder / "best.yaml").read_text()


def test_halving_time_against_the_grid_is_estimated_from_the_probes(halving_folder):
    h = write_report(halving_folder).halving
    assert h["measured"] == 3 and h["estimated"] == 2 and h["not_estimated"] == 0
    assert h["probe_job_s"] == pytest.approx(4 * 4.0 + 3 * 5.0, abs=0.5)
    assert h["full_job_s"] == pytest.approx(3 * 20.0, abs=0.5)
    # combination 1: its round-2 probe (5 s, 5 steps) + 95 more steps at 16/140 s each; 4: its failed probe's 4 s
    assert h["grid_job_s"] == pytest.approx(60.0 + 5.0 + 95 * 16 / 140 + 4.0, abs=1.0)
    assert h["checked"] == 2 and h["check_max_error"] is not None  # the estimate tried on finalists 2 and 3


def test_hparams_mark_pruned_sessions_with_their_round(halving_folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    write_report(halving_folder)
    acc = EventAccumulator(str(halving_folder / "hparams" / "job-1"))
    acc.Reload()
    content = acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hp = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
    assert hp["status"].string_value == "pruned" and hp["round"].string_value == "2"


def test_report_objective_primary_metric_picks_the_best_metric():
    from fastpipe.report.aggregate import pick_best

    rows = [{"status": "ok", "parity": "ok", "throughput": t, "metric_value": v, "higher_is_better": h}
            for t, v, h in ((100.0, 0.8, True), (50.0, 0.9, True), (300.0, None, True))]
    assert pick_best(rows)["throughput"] == 300.0
    assert pick_best(rows, "primary_metric")["metric_value"] == 0.9
    losses = [dict(r, higher_is_better=False) for r in rows]
    assert pick_best(losses, "primary_metric")["metric_value"] == 0.8  # a loss: lower is better
    assert SweepSpec().objective == "throughput"


def test_a_pruned_job_tied_with_the_last_kept_is_called_tied_not_below(tmp_path):
    """select and judge break a tie at the cut-off by job number: the dropped one is not "slower" or "below"."""
    from fastpipe.report.sweep_folder import halving_jobs
    from fastpipe.sweeps.halving.plan import select
    from fastpipe.sweeps.halving.to_target import judge

    probes = {1: ok(300.0), 2: ok(200.0), 3: ok(200.0), 4: ok(100.0)}
    out = select(probes, keep=0.5, finalists=1)
    assert out.kept == [1, 2] and out.dropped == [3, 4] and out.cutoff == 200.0  # 2 and 3 tie: the lower number goes on
    record = HalvingRecord(settings={"probe_steps": 5}, combos=[["a=0"], ["a=1"], ["a=2"], ["a=3"], ["a=4"]],
                           baseline=0, rounds=[{"round": 1, "steps": 5, "jobs": [1, 2, 3, 4], "kept": out.kept,
                                                "dropped": out.dropped, "failed": [], "cutoff": out.cutoff,
                                                "throughput": {str(n): m["throughput"] for n, m in probes.items()}}])
    notes = {j.num: j.note for j in halving_jobs(tmp_path, record)}
    assert notes[3] == ("dropped in round 1: 200.0 samples/s after 5 steady-state steps, tied with the slowest of the 2 "
                        "kept (job 2, 200.0); ties go to the lower job number")
    assert notes[4] == "dropped in round 1: 100.0 samples/s after 5 steady-state steps, slower than the 2 kept (slowest kept 200.0)"

    paused = lambda v: {"status": "ok", "stopped_by": "time_budget", "primary_metric": {"value": v}}  # noqa: E731
    outcome = judge({1: paused(0.9), 2: paused(0.8), 3: paused(0.8), 4: paused(0.75)}, 0.5, 1, True)
    assert outcome.kept == [1, 2] and outcome.dropped == [3, 4]
    record = HalvingRecord(settings={"mode": "time_to_target"}, combos=[["a=0"], ["a=1"], ["a=2"], ["a=3"], ["a=4"]],
                           baseline=0, rounds=[{"round": 1, "budget_s": 2.0, "reached": [], "kept": outcome.kept,
                                                "dropped": outcome.dropped, "values": outcome.values,
                                                "cutoff": outcome.cutoff}])
    notes = {j.num: j.note for j in halving_jobs(tmp_path, record)}
    assert notes[3] == ("dropped in round 1 at 2.0 s of training: best primary metric 0.8, tied with the worst of the 2 "
                        "kept (job 2, 0.8); ties go to the lower job number")
    assert notes[4] == "dropped in round 1 at 2.0 s of training: best primary metric 0.75, worse than the 2 kept (worst kept 0.8)"
    from fastpipe.report.sweep_folder import beaten

    near = beaten(0.79999, 0.8, [1, 2], {"1": 0.9, "2": 0.8}, ".4g", "below", "worst")
    assert near == "0.79999, below the 2 kept (worst kept 0.8)"  # apart, though both print 0.8 at 4 digits
