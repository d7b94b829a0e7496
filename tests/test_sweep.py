"""Sweeps and their report: aggregation logic (fast, in-process) and whole -m sweeps (slow)."""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from conftest import REPO, TINY, compose, run_cli
from fastpipe.errors import ConfigError
from fastpipe.launch.repeats import combine_repeats, finished_metrics, launch_repeats
from fastpipe.report.sweep import SweepSpec, aggregate, first_values, load_jobs, parity, pick_baseline
from fastpipe.report.winner import winner_yaml

ARTEFACTS = ("report.md", "report.csv", "report.png", "best.yaml")


# ------------------------------------------------------------------ helpers
def metrics(throughput=100.0, accuracy=0.9, status="ok", **extra):
    m = {"status": status, "reason": None if status == "ok" else "boom", "throughput": throughput,
         "accuracy": accuracy, "choices": {"precision": "fp32", "compile": "off"}, "overrides": [],
         "epoch_time_s": 1.0, "warmup_s": 0.5, "data_wait_frac": 0.1, "peak_mem_gb": 1.0, "gpu_util": None,
         "compile_fallback": None, "warnings": [], "env": {"torch": "x", "host": "h", "device": "cpu"}}
    m.update(extra)
    return m


def make_sweep(root: Path, jobs, task=("precision=fp32,amp", "compile=off,default"), report=None):
    """A sweep folder as Hydra + fastpipe leave it: multirun.yaml and N/{.hydra, metrics.json}."""
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


def test_repeats_median_spread_and_failure(tmp_path):
    runs = [metrics(t, accuracy=a, peak_mem_gb=p) for t, a, p in ((90.0, 0.8, 1.0), (110.0, 0.9, 3.0), (100.0, 0.85, 2.0))]
    m = combine_repeats(runs, ["repeat-0", "repeat-1", "repeat-2"], 3)
    assert m["throughput"] == 100.0 and m["accuracy"] == 0.85 and m["peak_mem_gb"] == 3.0
    assert m["repeats"]["min"] == 90.0 and m["repeats"]["max"] == 110.0 and m["repeats"]["spread"] == pytest.approx(0.2)
    bad = combine_repeats([runs[0], metrics(None, status="failed")], ["repeat-0", "repeat-1"], 3)
    assert bad["status"] == "failed" and bad["reason"] == "repeat 2 of 3: boom"

    calls = []

    def fake_launch(settings, run_dir):  # stands in for fastpipe.launch.launcher.launch
        calls.append(run_dir)
        return metrics(100.0 + len(calls))

    settings = SimpleNamespace(report=SimpleNamespace(repeats=3))
    out = launch_repeats(fake_launch, settings, tmp_path)
    assert calls == [tmp_path / f"repeat-{k}" for k in range(3)]
    assert out["throughput"] == 102.0 and json.loads((tmp_path / "metrics.json").read_text())["repeats"]["n"] == 3


def test_resume_accepts_only_an_ok_run_of_the_same_overrides(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps(metrics(overrides=["precision=amp", "train.lr=0.1"])))
    assert finished_metrics(tmp_path, ["precision=amp", "train.lr=0.1", "sweep.resume=true"]) is not None
    assert finished_metrics(tmp_path, ["precision=fp32", "train.lr=0.1", "sweep.resume=true"]) is None
    (tmp_path / "metrics.json").write_text(json.dumps(metrics(status="failed", overrides=["precision=amp"])))
    assert finished_metrics(tmp_path, ["precision=amp"]) is None


def test_winner_config_pins_choices_and_nests_keys():
    text = winner_yaml(["+sweep=ladder", "+ladder=s3_amp", "train.max_steps=12", "dataset.root=/d a",
                        "report.parity_tol=0.05", "sweep.resume=true", "+experiment=mine", "compile=off"],
                       {"data": "mmap", "precision": "amp", "compile": "off"}, ["a comment"])
    assert text.startswith("# @package _global_\n# a comment\n")
    cfg = OmegaConf.create(text)  # valid YAML: the defaults list and the keys
    assert list(cfg.defaults) == [{"/experiment": "mine"}, {"override /data": "mmap"},
                                  {"override /precision": "amp"}, {"override /compile": "off"}]  # "off" stays a string
    assert cfg.train.max_steps == 12 and cfg.dataset.root == "/d a"
    assert "report" not in cfg and "sweep" not in cfg and "ladder" not in text.split("\n", 2)[2]


def test_report_files_and_cli_on_a_finished_sweep(tmp_path):
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
    assert main([str(tmp_path / "nope")]) == 2  # one clear line, exit code 2
    assert main([str(tmp_path), "--baseline", "precision=fp16"]) == 2


def test_presets_compose_the_ladder_steps():
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from fastpipe.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        for preset in ("ladder", "all"):
            cfg = hydra_compose("config", [f"+sweep={preset}"], return_hydra_config=True)
            assert cfg.hydra.sweeper.params, preset
        params = hydra_compose("config", ["+sweep=ladder"], return_hydra_config=True).hydra.sweeper.params
    lines = [f"{k}={v}" for k, v in params.items()]
    (batch,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(lines), None)
    assert batch == [["+ladder=s0_baseline"], ["+ladder=s1_loader"], ["+ladder=s2_compile"],
                     ["+ladder=s3_amp"]]  # one job per step, not a product
    steps = [(c.data.name, c.precision.name, c.compile.name) for c in (compose(job) for job in batch)]
    assert steps == [("default", "fp32", "off"), ("mmap", "fp32", "off"), ("mmap", "fp32", "default"),
                     ("mmap", "amp", "default")]
    assert first_values(SweepSpec(["+sweep=ladder"], dict(params))) == ["+ladder=s0_baseline"]


# ------------------------------------------------------------------ whole sweeps (slow)
def sweep_cli(sweep_dir, args, extra_env=None, timeout=600):
    env = dict(os.environ, **(extra_env or {}))
    return subprocess.run([sys.executable, "-m", "fastpipe", "-m", *args, f"hydra.sweep.dir={sweep_dir}"],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)


GRID_ARGS = ["precision=fp32,amp", "compile=off,default"] + TINY


@pytest.fixture(scope="module")
def grid_sweep(tmp_path_factory):
    sweep_dir = tmp_path_factory.mktemp("grid") / "sweep"
    proc = sweep_cli(sweep_dir, GRID_ARGS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sweep_dir, proc


@pytest.mark.slow
def test_grid_sweep_writes_every_artefact_with_true_speedups(grid_sweep):
    sweep_dir, proc = grid_sweep
    for name in ARTEFACTS:
        assert (sweep_dir / name).is_file(), name
    rows = read_csv(sweep_dir / "report.csv")
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    base = next(r for r in rows if r["baseline"] == "True")
    assert (base["precision"], base["compile"]) == ("fp32", "off")  # the first value of each swept key
    for r in rows:
        assert float(r["speedup"]) == pytest.approx(float(r["throughput"]) / float(base["throughput"]), rel=1e-9)
    assert [float(r["throughput"]) for r in rows] == sorted((float(r["throughput"]) for r in rows), reverse=True)
    md = (sweep_dir / "report.md").read_text()
    assert md.count("\n| ") == 5 and "torch " in md and "| precision | compile |" in md
    assert "fastpipe sweep report" in proc.stdout  # the callback printed the table
    best = next(r for r in rows if r["best"] == "True")
    text = (sweep_dir / "best.yaml").read_text()
    assert best["parity"] != "FAIL" and f'override /precision: "{best["precision"]}"' in text
    assert f'override /compile: "{best["compile"]}"' in text


@pytest.mark.slow
def test_hparams_read_back_with_event_accumulator(grid_sweep):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    sweep_dir, _ = grid_sweep

    def plugin_data(path):
        acc = EventAccumulator(str(path))
        acc.Reload()
        content = acc.PluginTagToContent("hparams")
        return acc, {tag: plugin_data_pb2.HParamsPluginData.FromString(c) for tag, c in content.items()}

    _, exp = plugin_data(sweep_dir / "hparams")
    infos = {i.name: i for i in exp["_hparams_/experiment"].experiment.hparam_infos}
    assert {v.string_value for v in infos["precision"].domain_discrete.values} == {"fp32", "amp"}
    assert {m.name.tag for m in exp["_hparams_/experiment"].experiment.metric_infos} >= {"throughput", "speedup", "accuracy"}
    for r in read_csv(sweep_dir / "report.csv"):
        acc, data = plugin_data(sweep_dir / "hparams" / f"job-{r['job']}")
        hp = data["_hparams_/session_start_info"].session_start_info.hparams
        assert hp["precision"].string_value == r["precision"] and hp["compile"].string_value == r["compile"]
        assert hp["status"].string_value == "ok"
        assert acc.Scalars("throughput")[0].value == pytest.approx(float(r["throughput"]), rel=1e-6)


@pytest.mark.slow
def test_resume_skips_finished_jobs_and_rebuilds_the_report(grid_sweep, tmp_path):
    sweep_dir = tmp_path / "sweep"
    shutil.copytree(grid_sweep[0], sweep_dir)  # copy2 keeps the mtimes
    redo = next(r for r in read_csv(sweep_dir / "report.csv") if (r["precision"], r["compile"]) == ("amp", "off"))
    m_path = sweep_dir / redo["job"] / "metrics.json"
    m = json.loads(m_path.read_text())
    m_path.write_text(json.dumps(dict(m, status="failed", reason="interrupted")))
    kept = {p: p.stat().st_mtime_ns for p in sweep_dir.glob("*/metrics.json") if p != m_path}
    report_mtime = (sweep_dir / "report.md").stat().st_mtime_ns
    proc = sweep_cli(sweep_dir, GRID_ARGS + ["sweep.resume=true"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("finished ok earlier; skipped") == 3
    assert {p: p.stat().st_mtime_ns for p in kept} == kept  # untouched: not re-run
    assert json.loads(m_path.read_text())["status"] == "ok"
    assert (sweep_dir / "report.md").stat().st_mtime_ns > report_mtime
    assert [r["status"] for r in read_csv(sweep_dir / "report.csv")] == ["ok"] * 4


@pytest.fixture(scope="module")
def failing_sweep(tmp_path_factory):
    """dataset.root=GOOD,MISSING x +case=plain,fallback,killed, each measured twice (report.repeats=2):
    half the jobs lack their dataset."""
    from fastpipe.data import shapes

    root = tmp_path_factory.mktemp("failing")
    good = shapes.generate(root / "good", 4, 160, (16, 16), 0)
    conf = root / "conf"
    (conf / "case").mkdir(parents=True)
    (conf / "case" / "plain.yaml").write_text("# @package _global_\n{}\n")
    (conf / "case" / "fallback.yaml").write_text(  # an unknown backend: compile falls back to eager
        "# @package _global_\ndefaults:\n  - override /compile: default\ncompile:\n  backend: no_such_backend\n")
    (conf / "case" / "killed.yaml").write_text("# @package _global_\nmodel:\n  _target_: killmod.Killed\n")
    (root / "killmod.py").write_text(  # the training process dies of SIGKILL, as under the OOM killer
        "import os, signal\nclass Killed:\n    def __init__(self, num_classes=4):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n")
    sweep_dir = root / "sweep"
    args = ["--config-dir", str(conf), "dataset=imagefolder", f"dataset.root={good},{root / 'missing'}",
            "+case=plain,fallback,killed", "dataset.image_size=16", "report.repeats=2"] + [t for t in TINY if not t.startswith("dataset.num")]
    proc = sweep_cli(sweep_dir, args, {"PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, sweep_dir, good


@pytest.mark.slow
def test_failed_jobs_are_rows_and_the_report_is_still_written(failing_sweep):
    _, sweep_dir, good = failing_sweep
    for name in ARTEFACTS:
        assert (sweep_dir / name).is_file(), name
    rows = {(r["dataset.root"], r["case"]): r for r in read_csv(sweep_dir / "report.csv")}
    assert len(rows) == 6
    missing = [r for (root, _), r in rows.items() if root != str(good)]
    assert len(missing) == 3 and all(r["status"] == "failed" and "does not exist" in r["reason"] for r in missing)
    assert rows[(str(good), "plain")]["status"] == "ok" and rows[(str(good), "plain")]["best"] == "True"
    assert rows[(str(good), "fallback")]["status"] == "fallback"
    assert "no_such_backend" in rows[(str(good), "fallback")]["reason"]
    assert rows[(str(good), "killed")]["status"] == "failed" and "SIGKILL" in rows[(str(good), "killed")]["reason"]
    md = (sweep_dir / "report.md").read_text()
    assert md.count("| failed: ") == 4 and "| fallback: compile fell back" in md


@pytest.mark.slow
def test_repeats_measure_each_combination_and_stop_at_a_failure(failing_sweep):
    _, sweep_dir, good = failing_sweep
    rows = {(r["dataset.root"], r["case"]): r for r in read_csv(sweep_dir / "report.csv")}
    ok = rows[(str(good), "plain")]
    m = json.loads((Path(ok["dir"]) / "metrics.json").read_text())
    assert m["repeats"]["n"] == 2 and len(m["repeats"]["throughput"]) == 2
    assert sorted(p.parent.name for p in Path(ok["dir"]).glob("repeat-*/metrics.json")) == ["repeat-0", "repeat-1"]
    assert float(ok["throughput_min"]) <= float(ok["throughput"]) <= float(ok["throughput_max"])
    assert "(n=2)" in (sweep_dir / "report.md").read_text()
    missing = rows[(str(good.parent / "missing"), "plain")]
    assert missing["reason"].startswith("repeat 1 of 2: dataset folder")  # no second try of a bad input
    assert [p.name for p in Path(missing["dir"]).glob("repeat-*")] == ["repeat-0"]


@pytest.mark.slow
def test_saved_best_config_runs_from_a_project_config_dir(failing_sweep, tmp_path):
    root, sweep_dir, good = failing_sweep
    target = tmp_path / "conf" / "experiment" / "winner.yaml"
    proc = subprocess.run([sys.executable, "-m", "fastpipe.report", str(sweep_dir), "--save-best", str(target)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = target.read_text()
    assert text.startswith("# @package _global_") and "- /case: \"plain\"" in text
    assert "repeats" not in text  # report settings steer the sweep, not the winner
    (tmp_path / "conf" / "case").mkdir()
    shutil.copy(root / "conf" / "case" / "plain.yaml", tmp_path / "conf" / "case")  # the project's own group
    run = run_cli(["--config-dir", str(tmp_path / "conf"), "+experiment=winner", f"hydra.run.dir={tmp_path / 'run'}"])
    assert run.returncode == 0, run.stderr[-3000:]
    cfg = OmegaConf.load(tmp_path / "run" / ".hydra" / "config.yaml")
    assert cfg.dataset._target_.endswith("image_folder") and cfg.dataset.root == str(good) and cfg.train.max_steps == 12
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "ok"


@pytest.mark.slow
def test_bad_override_still_fails_fast(tmp_path):
    proc = sweep_cli(tmp_path / "sweep", ["precision=fp32,fp64"] + TINY)
    assert proc.returncode != 0 and "Could not find 'precision/fp64'" in proc.stderr
    assert not list((tmp_path / "sweep").glob("*/metrics.json"))  # nothing ran


@pytest.mark.slow
def test_a_winner_that_pins_every_group_profile_included_runs_again_as_an_experiment(tmp_path):
    """best.yaml pins each group as a group (``override /profile: "on"``, not a ``profile: 'on'`` key),
    so the spelling every saved winner prints, ``+experiment=NAME``, composes and trains."""
    from fastpipe.config import GROUPS

    choices = {"dataset": "shapes", "model": "tiny_cnn", "task": "classification", "optimizer": "adamw",
               "data": "default", "precision": "fp32", "compile": "off", "launcher": "single", "profile": "on",
               "lr_schedule": "constant", "logger": "tensorboard"}
    assert set(choices) == set(GROUPS)
    proc = sweep_cli(tmp_path / "sweep", [f"{g}={c}" for g, c in choices.items()] + TINY
                     + ["profile.wait=1", "profile.warmup=1", "profile.active=1"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    conf = tmp_path / "conf" / "experiment"
    conf.mkdir(parents=True)
    shutil.copy(tmp_path / "sweep" / "best.yaml", conf / "winner.yaml")
    text = (conf / "winner.yaml").read_text()
    for group, choice in choices.items():
        assert f'- override /{group}: "{choice}"' in text, group
    run = run_cli(["--config-dir", str(tmp_path / "conf"), "+experiment=winner", f"hydra.run.dir={tmp_path / 'run'}"])
    assert run.returncode == 0, run.stderr[-3000:]
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["status"] == "ok" and m["choices"] == choices
    assert list((tmp_path / "run" / "profile").glob("*.pt.trace.json"))
