"""DDP scaling: the same training with launcher=single on one GPU and launcher=ddp on --nproc GPUs.

ResNet-50, bf16 autocast, channels_last, compile=default (--compile), batch 256 per GPU,
GPU-resident synthetic data (dataset=synthetic), so the numbers measure the model and the gradient
all-reduce, not a loader. Each run is `python -m fastpipe ...` in a fresh process; the script reads
its metrics.json, prints images/s of every run and each DDP run's ratio to the single GPU, and writes
to --out: ddp.log (commands and output) and ddp.md (the table). Exit code 1 when a run failed.
``--variant "NAME:KEY=VALUE KEY=VALUE"`` adds a DDP run with those overrides (space-separated, e.g.
bf16 gradient compression); ``--profile`` adds a DDP run under profile=on, whose rank-0 trace lands
in runs/profile/profile/ (benchmarks/trace_summary.py reads it). Each run starts in an empty folder.

    PYTHONPATH=/tmp/site:$PWD python3 benchmarks/ddp.py --out benchmarks/results/ddp-h200x2   # 2 GPUs
    python3 benchmarks/ddp.py --out /tmp/ddp --variant "bf16:launcher.comm_hook=bf16" --profile
    python benchmarks/ddp.py --smoke --out /tmp/ddp-smoke     # CPU, TinyCNN, gloo (the test suite)

The environment is passed on as it is (PYTHONPATH, NCCL_* such as NCCL_NVLS_ENABLE=0).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 600  # one run: compile included; a hung run must not hang the benchmark


def common_overrides(a) -> list:
    """Everything both runs share: only the launcher differs between them."""
    steps = a.warmup + a.steps
    return [f"model={a.model}", "dataset=synthetic", f"dataset.image_size={a.image_size}",
            f"dataset.num_classes={a.classes}", f"dataset.num_images={a.batch * steps}",
            f"precision={a.precision}", f"compile={a.compile}", f"runtime.channels_last={str(a.channels_last).lower()}",
            f"train.batch_size={a.batch}", "train.epochs=1", f"train.max_steps={steps}",
            f"measure.warmup_steps={a.warmup}", f"measure.window={a.window}", "runtime.progress=false",
            f"device={a.device}"] + (["precision.dtype=bf16"] if a.precision == "amp" else [])


def run(name: str, overrides: list, a, log) -> dict:
    """One fastpipe run in a fresh process; its metrics.json (or a failed row)."""
    run_dir = a.out / "runs" / name
    shutil.rmtree(run_dir, ignore_errors=True)  # no result (or trace) of an earlier run can be read as this one's
    cmd = [sys.executable, "-m", "fastpipe", *overrides, f"hydra.run.dir={run_dir}"]
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        output, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        output, code = f"{exc.stdout or ''}{exc.stderr or ''}\nkilled after {RUN_TIMEOUT_S} s", -1
    wall = time.perf_counter() - start
    log.write(f"{output}\n[{name}: exit {code}, {wall:.0f} s wall]\n\n")
    log.flush()
    try:
        metrics = json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        metrics = {"status": "failed", "reason": (output.strip().splitlines() or ["no output"])[-1]}
    metrics["wall_s"] = wall
    return metrics


def table(a, rows: list) -> str:
    """The markdown table: one row per (name, metrics) run, then each DDP run's ratio to the single GPU."""
    def cell(value, spec: str) -> str:
        return "n/a" if value is None else format(value, spec)

    single = rows[0][1]
    env = next((m["env"] for _, m in rows if m.get("env")), {})
    lines = [f"{a.model}, batch {a.batch} per process, {a.image_size} px, precision={a.precision}"
             f"{' bf16' if a.precision == 'amp' else ''}, channels_last={a.channels_last}, compile={a.compile}, "
             f"dataset=synthetic; {a.warmup} warm-up + {a.steps} measured steps per process",
             f"device: {env.get('device_name')} (torch {env.get('torch')}, cuda {env.get('cuda')})", "",
             "| run | processes | images/s | step median ms | warm-up s | peak mem GB (worst rank) "
             "| GPU util % | wall s | status |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, m in rows:
        status = m.get("status") if m.get("status") == "ok" else f"failed: {m.get('reason')}"
        lines.append(f"| {name} | {(m.get('env') or {}).get('world_size', 'n/a')} | {cell(m.get('throughput'), ',.0f')} "
                     f"| {cell((m.get('step_time_ms') or {}).get('median'), '.1f')} | {cell(m.get('warmup_s'), '.1f')} "
                     f"| {cell(m.get('peak_mem_gb'), '.2f')} | {cell(m.get('gpu_util'), '.0f')} "
                     f"| {cell(m.get('wall_s'), '.0f')} | {status} |")
    lines.append("")
    for name, m in rows[1:]:
        ratio = scaling(single, m)
        note = " (profiled: timing distorted)" if name.startswith("profile") else ""
        lines.append(f"{name} / single: {'n/a' if ratio is None else f'{ratio:.2f}x'} on {a.nproc} processes "
                     f"(scaling efficiency {'n/a' if ratio is None else f'{100 * ratio / a.nproc:.0f} %'}){note}")
        per_rank = (m.get("per_rank") or {}).get("throughput")
        if per_rank:
            lines.append(f"{name} images/s per rank: " + ", ".join(f"{v:,.0f}" for v in per_rank if v is not None))
    return "\n".join(lines)


def scaling(single: dict, ddp: dict):
    s, d = single.get("throughput"), ddp.get("throughput")
    return d / s if s and d else None


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="folder for ddp.log, ddp.md and the run folders")
    p.add_argument("--nproc", type=int, default=2, help="DDP processes (GPUs) for the ddp run")
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch", type=int, default=256, help="per process")
    p.add_argument("--warmup", type=int, default=30, help="steps excluded: compilation, cuDNN autotuning")
    p.add_argument("--steps", type=int, default=300, help="measured steps per process")
    p.add_argument("--window", type=int, default=20)
    p.add_argument("--compile", default="default", help="the compile choice of every run (off, default, ...)")
    p.add_argument("--variant", action="append", default=[], metavar='"NAME:KEY=VALUE ..."',
                   help="an extra DDP run with these space-separated overrides (repeatable)")
    p.add_argument("--profile", action="store_true", help="an extra DDP run under profile=on (a trace of rank 0)")
    p.add_argument("--smoke", action="store_true", help="CPU, TinyCNN at 32 px, fp32 eager, gloo, a few steps")
    a = p.parse_args(argv)
    a.image_size, a.classes, a.precision, a.channels_last, a.device = 224, 1000, "amp", True, "cuda"
    a.variants, taken = [], {"single", "ddp", "profile"}  # run folder names already in use
    for variant in a.variant:
        name, _, extra = variant.partition(":")
        if not name or not extra.split() or name in taken or "/" in name:
            p.error(f"--variant {variant!r}: write a new NAME (not {', '.join(sorted(taken))}), then "
                    "':KEY=VALUE KEY=VALUE ...'")
        taken.add(name)
        a.variants.append((name, shlex.split(extra)))
    if a.smoke:
        a.model, a.batch, a.image_size, a.classes, a.precision, a.compile = "tiny_cnn", 16, 32, 10, "fp32", "off"
        a.channels_last, a.device, a.warmup, a.steps, a.window = False, "cpu", 2, 6, 3
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    a.out = a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    base = common_overrides(a)
    ddp = ["launcher=ddp", f"launcher.nproc_per_node={a.nproc}"]
    runs = [("launcher=single", "single", ["launcher=single"]), (f"launcher=ddp nproc_per_node={a.nproc}", "ddp", ddp)]
    runs += [(f"ddp {name}", name, ddp + extra) for name, extra in a.variants]
    if a.profile:  # a few steps past warm-up traced on rank 0 (profile's wait covers nothing else)
        runs.append(("profile=on ddp", "profile", ddp + ["profile=on", f"profile.wait={a.warmup}", "profile.warmup=1",
                                                        f"profile.active={max(1, min(5, a.steps - 1))}"]))
    rows = []
    with open(a.out / "ddp.log", "w") as log:
        log.write(f"# benchmarks/ddp.py {' '.join(sys.argv[1:])}\n# NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}\n")
        for label, folder, overrides in runs:
            rows.append((label, run(folder, base + overrides, a, log)))
            text = table(a, rows)  # rewritten after each run: a later timeout keeps the earlier rows
            (a.out / "ddp.md").write_text(text + "\n")
        log.write(text + "\n")
    print(text)
    return 0 if all(m.get("status") == "ok" for _, m in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
