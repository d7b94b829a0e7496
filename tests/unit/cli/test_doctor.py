"""python -m fastpipe.doctor: the report's keys, the exit code, and --bench on the CPU."""
from __future__ import annotations

import json

import pytest

from fastpipe.cli import doctor

FAST = ["--compile-backend", "eager"]  # Dynamo without Inductor's C++ build: seconds, not tens


def run(capsys, *args):
    code = doctor.main([*FAST, *args])
    return code, capsys.readouterr().out


def test_json_report_has_every_check_and_exits_0_on_a_working_cpu_machine(capsys):
    code, out = run(capsys, "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] is True and report["problems"] == []
    for key in ("python", "torch", "torchvision", "cuda_build", "cuda_available", "driver", "cudnn", "gpus",
                "nccl", "dali", "hydra", "omegaconf", "tf32", "compile", "notes"):
        assert key in report, key
    assert report["torch"] == __import__("torch").__version__
    assert set(report["tf32"]) == {"matmul", "cudnn", "float32_matmul_precision"}
    assert report["compile"]["ok"] is True and report["compile"]["backend"] == "eager"
    assert set(report["nccl"]) == {"available", "version", "gloo"} and report["nccl"]["gloo"] is True
    assert set(report["dali"]) == {"installed", "package", "version", "error"}
    if not report["cuda_available"]:
        assert report["gpus"] == [] and any("no CUDA device" in n for n in report["notes"])


def test_text_report_names_each_component(capsys):
    code, out = run(capsys)
    assert code == 0 and out.startswith("fastpipe doctor")
    for label in ("torch", "driver", "cuDNN", "NCCL", "DALI", "Hydra", "OmegaConf", "TF32", "compile", "status"):
        assert f"  {label}" in out, label


def test_cuda_required_but_absent_exits_1(capsys):
    if __import__("torch").cuda.is_available():
        pytest.skip("checks a CPU-only machine")
    code, out = run(capsys, "--json", "--require", "cuda")
    assert code == 1 and json.loads(out)["problems"] == ["no CUDA device: training runs on the CPU (device=auto)"]


def test_broken_requirement_exits_1_with_the_problem(capsys, monkeypatch):
    real = doctor._version
    monkeypatch.setattr(doctor, "_version", lambda d: "1.1.0" if d == "hydra-core" else real(d))
    code, out = run(capsys, "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    assert report["problems"] == ["hydra-core 1.1.0: fastpipe needs >=1.3.2,<1.4"]


def test_a_broken_compile_is_a_note_unless_required(capsys, monkeypatch):
    monkeypatch.setattr(doctor, "compile_smoke", lambda backend, device: {
        "ok": False, "backend": backend, "device": device, "seconds": 0.0, "error": "BackendCompilerFailed: x"})
    code, out = run(capsys, "--json")
    assert code == 0 and any("falls back to eager" in n for n in json.loads(out)["notes"])
    code, out = run(capsys, "--json", "--require", "compile")
    assert code == 1 and any("falls back to eager" in p for p in json.loads(out)["problems"])


def test_bench_on_cpu_reports_labelled_ceilings(capsys):
    code, out = run(capsys, "--json", "--bench", "--size", "64", "--copy-mb", "1", "--repeats", "3")
    bench = json.loads(out)["bench"]
    if bench["device"] != "cpu":
        pytest.skip("a GPU machine: the CPU bench does not run")
    assert bench["timing"] == "perf_counter, median of 3 after warm-up"
    labels = [r["label"] for r in bench["results"]]
    assert labels == ["cpu matmul 64x64 fp32", "cpu matmul 64x64 bf16", "cpu memory copy 1 MiB (read + write)"]
    assert [r["unit"] for r in bench["results"]] == ["TFLOP/s", "TFLOP/s", "GB/s"]
    assert all(r["value"] > 0 and r["median_s"] > 0 for r in bench["results"])
