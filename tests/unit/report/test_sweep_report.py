"""The sweep report from the job folders: baseline, speed-ups, parity, failed rows, the winner, the report
files and python -m fastpipe.report. (Whole -m sweeps: tests/integration/test_sweeps.py.)"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import RESUMABLE, compose, run_in_process
from fastpipe.errors import ConfigError
from fastpipe.report.baseline import first_values, parity, pick_baseline
from fastpipe.report.sweep_folder import SweepSpec, load_jobs
from fastpipe.report.aggregate import aggregate
from fastpipe.report.winner import winner_yaml
from job_metrics import job_metrics as metrics
from job_metrics import make_sweep


# ------------------------------------------------------------------ helpers
def grid(**by_job):
    """The 2x2 precision x compile jobs in Hydra's order; by_job overrides metrics per job number."""
    combos = [("precision=fp32", "compile=off"), ("precision=fp32", "compile=default"),
              ("precision=amp", "compile=off"), ("precision=amp", "compile=default")]
    return [(c, by_job.get(f"j{i}", metrics(100.0 * (i + 1)))) for i, c in enumerate(combos)]


def read_csv(path: Path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


# ------------------------------------------------------------------ aggregation (fast)
def test_first_values_follow_the_basic_sweeper():
    spec = SweepSpec(["+sweep=ladder", "precision=fp32,amp", "compile=default", "train.lr=0.1,0.2"],
                     {"+ladder": "s0_baseline,s1_loader", "compile": "off,default"})
    # a later plain override replaces a swept key, exactly as BasicSweeper combines them
    assert first_values(spec) == ["+ladder=s0_baseline", "precision=fp32", "train.lr=0.1"]


def test_baseline_default_named_and_numbered(tmp_path):
    jobs = load_jobs(make_sweep(tmp_path, grid()))
    spec = SweepSpec(["precision=fp32,amp", "compile=off,default"])
    assert pick_baseline(jobs, spec).num == 0  # first value of every swept key
    assert pick_baseline(jobs, SweepSpec(spec.task_overrides, baseline="precision=amp,compile=default")).num == 3
    assert pick_baseline(jobs, SweepSpec(spec.task_overrides, baseline="precision=amp compile=off")).num == 2
    # keys left out keep their first value: compile=default alone means fp32 + default
    assert pick_baseline(jobs, SweepSpec(spec.task_overrides, baseline="compile=default")).num == 1
    assert pick_baseline(jobs, SweepSpec(spec.task_overrides, baseline="2")).num == 2
    with pytest.raises(ConfigError, match="matches no job"):
        pick_baseline(jobs, SweepSpec(spec.task_overrides, baseline="precision=fp16"))
    with pytest.raises(ConfigError, match="name the job by its overrides"):
        pick_baseline(jobs, SweepSpec(spec.task_overrides, baseline="amp"))


def test_parity_verdicts():
    assert parity(0.90, 0.90, 0.01) == "ok"
    assert parity(0.891, 0.90, 0.01) == "ok"  # within the tolerance
    assert parity(0.88, 0.90, 0.01) == "FAIL"
    assert parity(None, 0.90, 0.01) == "n/a" and parity(0.9, None, 0.01) == "n/a"


def test_speedups_parity_and_best(tmp_path):
    jobs = load_jobs(make_sweep(tmp_path, grid(j3=metrics(900.0, accuracy=0.70),  # fastest, accuracy fell
                                               j2=metrics(300.0, compile_fallback="BackendCompilerFailed: x"),
                                               j1=metrics(200.0, accuracy=0.895))))
    result = aggregate(tmp_path, jobs, SweepSpec(["precision=fp32,amp", "compile=off,default"]))
    by_job = {r["job"]: r for r in result.rows}
    assert [r["job"] for r in result.rows] == [3, 2, 1, 0]  # fastest first
    assert result.baseline["job"] == 0 and by_job[0]["parity"] == "baseline"
    assert by_job[3]["speedup"] == pytest.approx(9.0) and by_job[1]["speedup"] == pytest.approx(2.0)
    assert by_job[3]["parity"] == "FAIL" and by_job[1]["parity"] == "ok"
    assert by_job[2]["status"] == "fallback" and "BackendCompilerFailed" in by_job[2]["reason"]
    assert result.best["job"] == 1  # job 3 lost accuracy, job 2 ran eager: never the winner
    assert result.columns == ["precision", "compile"]


def test_failed_missing_and_synthetic_rows(tmp_path):
    jobs = load_jobs(make_sweep(tmp_path, grid(j0=metrics(100.0, accuracy=None), j1=None,
                                               j2=metrics(None, None, status="failed"),
                                               j3=metrics(400.0, accuracy=None))))
    result = aggregate(tmp_path, jobs, SweepSpec(["precision=fp32,amp", "compile=off,default"]))
    by_job = {r["job"]: r for r in result.rows}
    assert by_job[1]["status"] == "missing" and "did not finish" in by_job[1]["reason"]
    assert by_job[2]["status"] == "failed" and by_job[2]["reason"] == "boom" and by_job[2]["speedup"] is None
    # dataset=synthetic: no accuracy, parity n/a, still eligible (nothing to compare)
    assert by_job[3]["parity"] == "n/a" and result.best["job"] == 3
    assert [r["job"] for r in result.rows][-2:] == [1, 2]  # rows without a throughput last


def test_failed_baseline_gives_no_speedups(tmp_path):
    jobs = load_jobs(make_sweep(tmp_path, grid(j0=metrics(None, None, status="failed"))))
    result = aggregate(tmp_path, jobs, SweepSpec(["precision=fp32,amp", "compile=off,default"]))
    assert result.baseline["job"] == 0 and all(r["speedup"] is None for r in result.rows)
    assert any("no speed-ups" in n for n in result.notes) and result.best["job"] == 3


def test_winner_config_pins_choices_and_nests_keys():
    text = winner_yaml(["+sweep=ladder", "+ladder=s3_amp", "train.max_steps=12", "dataset.root=/d a",
                        "report.parity_tol=0.05", "sweep.resume=true", "+experiment=mine", "compile=off"],
                       {"data": "mmap", "precision": "amp", "compile": "off"}, ["a comment"])
    assert text.startswith("# @package _global_\n# a comment\n")
    cfg = OmegaConf.create(text)  # valid YAML: the defaults list and the keys
    assert list(cfg.defaults) == ["/experiment/mine", {"override /data": "mmap"},
                                  {"override /precision": "amp"}, {"override /compile": "off"}]  # "off" stays a string
    assert cfg.train.max_steps == 12 and cfg.dataset.root == "/d a"
    assert "report" not in cfg and "sweep" not in cfg and "ladder" not in text.split("\n", 2)[2]


def test_a_winner_of_jobs_run_with_an_experiment_runs_as_an_experiment_itself(tmp_path):
    # The job ran +experiment=mine; its winner, saved as experiment/best.yaml, includes mine as a config.
    conf = tmp_path / "conf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "mine.yaml").write_text("# @package _global_\ndefaults:\n  - override /precision: amp\n"
                                    "train:\n  epochs: 7\n  batch_size: 24\n")
    (conf / "best.yaml").write_text(winner_yaml(["+experiment=mine", "train.epochs=5"],
                                                {"precision": "amp", "compile": "off"}, []))
    cfg = compose(["+experiment=best", f"hydra.searchpath=[file://{tmp_path / 'conf'}]"])
    assert cfg.train.epochs == 5 and cfg.train.batch_size == 24  # the winner's keys over the experiment's


def test_report_files_and_cli_on_a_finished_sweep(tmp_path, capsys):
    from fastpipe.report.__main__ import main

    make_sweep(tmp_path, grid())
    assert main([str(tmp_path), "--quiet", "--baseline", "precision=amp,compile=off"]) == 0
    rows = read_csv(tmp_path / "report.csv")
    assert [r["job"] for r in rows] == ["3", "2", "1", "0"] and rows[1]["baseline"] == "True"
    assert float(rows[0]["speedup"]) == pytest.approx(400.0 / 300.0)
    md = (tmp_path / "report.md").read_text()
    assert "| 2 (baseline) | amp | off |" in md and "named by report.baseline" in md
    assert (tmp_path / "report.png").read_bytes()[:4] == b"\x89PNG"
    target = tmp_path / "proj" / "conf" / "experiment" / "fastest.yaml"
    assert main([str(tmp_path), "--quiet", "--save-best", str(target)]) == 0
    assert "override /precision: \"amp\"" in target.read_text() and "+experiment=fastest" in target.read_text()
    elsewhere = tmp_path / "out" / "w.yaml"  # not in an experiment/ folder: the hint names the sweep's folder
    assert main([str(tmp_path), "--quiet", "--save-best", str(elsewhere)]) == 0
    hint = f"python -m fastpipe.report {tmp_path} --save-best conf/experiment/NAME.yaml"
    assert hint in capsys.readouterr().out and hint in elsewhere.read_text()
    assert main([str(tmp_path / "nope")]) == 2  # one clear line, exit code 2
    assert main([str(tmp_path), "--baseline", "precision=fp16"]) == 2


def test_the_report_of_a_single_run_folder_is_one_line(tmp_path, capsys):
    from fastpipe.report.__main__ import main

    run_in_process(tmp_path, RESUMABLE + ["train.max_steps=3"])
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text("[]\n")
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{tmp_path} is a single run's folder, not a sweep's" in err


def test_the_gpus_column_names_the_gpu_that_measured_the_row():
    from fastpipe.report.timing import gpus_text

    assert gpus_text({"gpus": ["2", "3"]}) == "2,3" and gpus_text({"gpus": []}) == "cpu"
    assert gpus_text(None, {"device": "cuda:0", "world_size": 1}) == "0"  # a serial sweep on a GPU
    assert gpus_text(None, {"device": "cuda:0", "world_size": 1, "visible_devices": "5"}) == "5"
    assert gpus_text(None, {"device": "cpu", "world_size": 1}) is None and gpus_text(None, None) is None


def test_the_footer_names_what_the_jobs_loggers_left_in_their_folders():
    from fastpipe.report.tables import _job_files

    assert _job_files([{"choices": {"logger": "tensorboard"}}]) == "metrics.json, graph.txt, TensorBoard scalars (`tb/`)"
    assert _job_files([{"choices": {"logger": "[csv, mlflow]"}}]) == (
        "metrics.json, graph.txt, `metrics.csv`, its MLflow run (`trackers.json` says where)")
    assert _job_files([{"choices": {"logger": "none"}}]) == "metrics.json, graph.txt"


def test_a_record_that_is_not_the_jobs_own_or_not_a_record_is_a_failed_row_with_its_reason(tmp_path):
    """Another run's metrics.json in a job's folder (another precision), a JSON list, a number as text and a
    file cut short: each its row's reason, never a traceback, and none of them ranked or saved."""
    from fastpipe.report.publish import write_report

    make_sweep(tmp_path, grid())
    foreign = json.loads((tmp_path / "1" / "metrics.json").read_text())
    foreign.update(overrides=["precision=amp", "compile=default"], throughput=10_000.0)  # faster, but not job 1's
    (tmp_path / "1" / "metrics.json").write_text(json.dumps(foreign))
    (tmp_path / "2" / "metrics.json").write_text("[1, 2, 3]")
    bad = json.loads((tmp_path / "3" / "metrics.json").read_text())
    (tmp_path / "3" / "metrics.json").write_text(json.dumps(dict(bad, throughput="fast")))
    result = write_report(tmp_path)
    rows = {r["job"]: r for r in read_csv(tmp_path / "report.csv")}
    assert rows["0"]["status"] == "ok" and [rows[j]["status"] for j in "123"] == ["failed"] * 3
    reasons = {j: r["reason"] for j, r in rows.items()}
    md = (tmp_path / "report.md").read_text()
    assert "failed: its metrics.json is another run's: this job sets precision=fp32, the record precision=amp" in md
    assert "failed: its metrics.json is not a run's record: it is a JSON list, not an object" in md
    assert "failed: its metrics.json is not a run's record: its throughput is 'fast', not a number" in md
    assert all(reasons[j].endswith("; run the job again (sweep.resume=true reruns it)") for j in "123")
    assert result.best is None or result.best["job"] == 0
    (tmp_path / "0" / "metrics.json").write_text('{"status": "ok", "throughput": 1')  # cut short
    write_report(tmp_path)
    assert "is not a run's record (not JSON: cut short?)" in (tmp_path / "report.md").read_text()
