"""Command lines as a user types them: unknown choices, the Slurm and plugin configs (--help and --cfg job:
test_help.py), one clear line and exit code 2 for bad input, what a run leaves behind.

The module's commands are independent of each other, so the ``commands`` fixture starts them side by
side once; each test reads its own command's output and run folder."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from fastpipe.cli.pack import main as pack_main
from fastpipe.data import shapes
from fastpipe.data.pack.reader import PackReader
from fastpipe.errors import EXIT_CODE

from conftest import REPO, TINY, in_process, run_cli, without_shapes

RUN = ["dataset.num_images=200", "dataset.image_size=16", "train.batch_size=16", "train.max_steps=4",
       "measure.warmup_steps=2", "measure.window=3", "runtime.progress=false", "data.num_workers=0"]
BAD_INPUTS = {  # name: (overrides, what the one line says)
    "imagefolder-without-root": (["dataset=imagefolder"], "dataset=imagefolder needs a folder: add dataset.root="),
    "imagefolder-missing": (["dataset=imagefolder", "dataset.root=/nonexistent/images"],
                            "dataset folder /nonexistent/images does not exist"),
    "cuda-absent": (["device=cuda"], "device=cuda was asked for but CUDA is not available"),
    "model-not-importable": (["model._target_=nosuchpkg.Net"], "model._target_='nosuchpkg.Net' cannot be imported"),
}


@pytest.fixture(scope="module")
def commands(tmp_path_factory):
    """Every command of this module run once: {name: (CompletedProcess, its run or sweep folder)}. The default
    run is the one ``python -m fastpipe`` process, the command line's own entry, started first; the others
    run meanwhile in this process, as a program calling fastpipe would run them."""
    root = tmp_path_factory.mktemp("cli")
    args = {
        "unknown-choice": ["precision=fp64"],
        "slurm-config": ["hydra/launcher=fastpipe_slurm", "--cfg", "hydra", "--package", "hydra.launcher"],
        "sweep-value-refused": ["-m", "train.batch_size=16,abc", "train.max_steps=1",
                                f"hydra.sweep.dir={root / 'sweep-value-refused'}"],
        "sweep-unknown-choice": ["-m", "task=classification,clasification",
                                 f"hydra.sweep.dir={root / 'sweep-unknown-choice'}"],
        "sweep-key-refused": ["-m", "+model.widht=8,16", "train.max_steps=1",
                              f"hydra.sweep.dir={root / 'sweep-key-refused'}"],
        "sweep-target-refused": ["-m", "train.target=0.5,1.5", "train.eval_every=1", "train.max_steps=1",
                                 f"hydra.sweep.dir={root / 'sweep-target-refused'}"],
        "oom-in-training": [*RUN, "model._target_=fault_models.OutOfMemoryNet",
                            f"hydra.run.dir={root / 'oom-in-training'}"],
    }
    for name, (overrides, _) in BAD_INPUTS.items():
        args[name] = ((without_shapes(TINY) if "dataset=imagefolder" in overrides else TINY) + overrides
                      + [f"hydra.run.dir={root / name}"])
    default = subprocess.Popen([sys.executable, "-m", "fastpipe", f"hydra.run.dir={root / 'default-run'}",
                                "runtime.progress=false"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        done = {name: (in_process(command), root / name) for name, command in args.items()}
        out, err = default.communicate(timeout=600)
    finally:
        if default.poll() is None:
            default.kill()
    done["default-run"] = (subprocess.CompletedProcess(default.args, default.returncode, out, err), root / "default-run")
    return done


def test_unknown_choice_lists_valid_ones_on_the_command_line(commands):
    proc, _ = commands["unknown-choice"]
    assert proc.returncode != 0
    assert "precision/fp64" in proc.stderr and "fp32" in proc.stderr and "amp" in proc.stderr
    proc, sweep_dir = commands["sweep-unknown-choice"]  # in a sweep: fastpipe's line alone, nothing before it
    assert proc.returncode != 0 and proc.stderr.startswith("fastpipe: task=clasification is not a choice of task "
                                                           "(did you mean task=classification?)")
    assert not list(sweep_dir.rglob("metrics.json"))


def test_the_default_run_writes_every_artefact_and_metric_and_reaches_ninety_percent(commands):
    """The README's promise: `python -m fastpipe` with no overrides leaves every artefact and metric and
    reaches >= 0.90 held-out accuracy."""
    proc, run_dir = commands["default-run"]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "fastpipe training graph" in proc.stdout and "fastpipe run summary" in proc.stdout
    for name in (".hydra/config.yaml", ".hydra/overrides.yaml", "graph.txt", "summary.txt", "metrics.json", "loss.png"):
        assert (run_dir / name).is_file(), name
    lines = proc.stdout.strip().splitlines()  # where the run went: its first and last line, its summary kept
    assert lines[0] == lines[-1] == f"fastpipe: run folder: {run_dir}"
    summary = (run_dir / "summary.txt").read_text()
    assert summary.startswith("fastpipe run summary") and proc.stdout.endswith(f"{summary}{lines[-1]}\n")
    assert not (run_dir / "__main__.log").exists()  # no empty Hydra job log
    assert list((run_dir / "tb").glob("events.out.tfevents.*"))
    m = json.loads((run_dir / "metrics.json").read_text())
    for key in ("status", "choices", "throughput", "step_time_ms", "epoch_time_s", "warmup_s", "data_wait_frac",
                "peak_mem_gb", "gpu_util", "final_loss", "accuracy", "env", "warnings"):
        assert key in m, key
    assert m["status"] == "ok" and m["warnings"] == []
    assert m["choices"] == {"data": "default", "precision": "fp32", "compile": "off", "launcher": "single",
                            "model": "tiny_cnn", "dataset": "shapes", "profile": "off", "task": "classification",
                            "optimizer": "adamw", "lr_schedule": "cosine", "logger": "tensorboard"}
    assert m["throughput"] > 0 and m["warmup_s"] > 0 and m["epoch_time_s"] > 0
    assert 0 < m["step_time_ms"]["median"] <= m["step_time_ms"]["p90"]
    assert 0 <= m["data_wait_frac"] < 1 and m["peak_mem_gb"] > 0 and m["gpu_util"] is None
    assert math.isfinite(m["final_loss"]) and 0 <= m["accuracy"] <= 1
    # 3 epochs of 29 steps (1,905 training images in batches of 64, the last partial one dropped); the
    # first 5 are warm-up
    assert m["steps"] == 87 and m["measured_steps"] == 82
    assert m["env"]["world_size"] == 1 and m["env"]["device"] == "cpu" and m["env"]["torch"]
    assert m["accuracy"] >= 0.90, m["accuracy"]


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_exits_with_one_clear_line(commands, name):
    proc, run_dir = commands[name]
    message = BAD_INPUTS[name][1]
    assert proc.returncode == EXIT_CODE
    assert "fastpipe: error: " in proc.stderr and message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert json.loads((run_dir / "metrics.json").read_text())["status"] == "failed"


def test_a_value_fastpipe_refuses_stops_a_sweep_before_any_job_runs(commands):
    """train.batch_size takes an integer or auto, which Hydra's types cannot say: fastpipe checks every
    job of the grid (command-line lists and a preset's params) before the first one starts."""
    proc, sweep_dir = commands["sweep-value-refused"]
    assert proc.returncode == EXIT_CODE
    assert proc.stderr.strip().splitlines()[-1] == (
        "fastpipe: error: job 1 of the sweep (train.batch_size=abc train.max_steps=1): "
        "train.batch_size='abc' is not valid; use 'auto' or an integer >= 1; nothing was run")
    assert not list(sweep_dir.rglob("metrics.json"))
    # A misspelt key of a _target_ group, a target its task's metric can never reach: also every job's values.
    for name, job, says in (("sweep-key-refused", "job 0 of the sweep (+model.widht=8 train.max_steps=1)",
                             "model.widht is not a parameter of fastpipe.models.TinyCNN"),
                            ("sweep-target-refused", "job 1 of the sweep (train.target=1.5 ", "train.target=1.5")):
        proc, sweep_dir = commands[name]
        last = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == EXIT_CODE and last.startswith(f"fastpipe: error: {job}") and says in last, last
        assert last.endswith("nothing was run") and not list(sweep_dir.rglob("metrics.json"))


def test_a_failure_in_training_is_one_line_and_exit_2(commands):
    """A run that fails while it trains (out of memory): exit code 2 and one line, no traceback."""
    proc, run_dir = commands["oom-in-training"]
    assert proc.returncode == EXIT_CODE == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("fastpipe: error: ")]
    assert len(errors) == 1 and "out of memory with train.batch_size=16" in errors[0]
    assert proc.stdout.strip().splitlines()[-1] == f"fastpipe: run folder: {run_dir}"
    assert "Traceback" not in proc.stderr
    assert json.loads((run_dir / "metrics.json").read_text())["status"] == "failed"


def test_slurm_launcher_config_prints_from_the_command_line(commands):
    proc, _ = commands["slurm-config"]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "SlurmLauncher" in proc.stdout and "tasks_per_node: 1" in proc.stdout


def test_the_plugins_are_found_from_a_project_folder_outside_the_repository(tmp_path):
    """From a project folder, fastpipe's entry point finds its plugins (Hydra's scan does, and fastpipe
    registers them too, for installs behind an import hook)."""
    targets = {"hydra/sweeper=halving": "halving_sweeper.HalvingSweeper",
               "hydra/launcher=gpus": "gpus_launcher.GpusLauncher"}
    proc = run_cli([*targets, "--cfg", "hydra"], cwd=tmp_path)  # one command: Hydra's config names both
    assert proc.returncode == 0, proc.stderr[-1500:]
    for target in targets.values():
        assert f"_target_: hydra_plugins.fastpipe_sweeps.{target}" in proc.stdout


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """A small ImageFolder of 40x30 JPEGs (3 classes), packed at 24x24 in chunks of 64 images (4 chunks)."""
    folder = shapes.generate(tmp_path_factory.mktemp("mmap") / "images", 3, 240, (40, 30), seed=5)
    out = tmp_path_factory.mktemp("pack") / "images.fppack"
    assert pack_main([str(folder), str(out), "--size", "24", "--threads", "1", "--chunk-images", "64",
                      "--no-progress"]) == 0
    return out


def test_flipped_image_byte_fails_verify_naming_the_chunk(packed, tmp_path, capsys):
    """python -m fastpipe.pack --verify (data=mmap's in-process refusal: tests/unit/data/test_mmap.py)."""
    pack = PackReader(packed)
    offset = pack.data_offset + 2 * 64 * 24 * 24 * 3 + 1000  # inside chunk 2 (images 128..191)
    data = bytearray(packed.read_bytes())
    data[offset] ^= 0xFF
    bad = tmp_path / "flip.fppack"
    bad.write_bytes(bytes(data))
    capsys.readouterr()
    assert pack_main(["--verify", str(bad), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "flip.fppack is corrupt: chunk 2 of 4 (images 128..191)" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
