"""DDP scaling: the same training with launcher=single on one GPU and launcher=ddp on --nproc GPUs.

ResNet-50, bf16 autocast, channels_last, compile=default (--compile), batch 256 per GPU,
GPU-resident synthetic data (dataset=synthetic), so the numbers measure the model and the gradient
all-reduce, not a loader. Each run is `python -m fastpipe ...` in a fresh process (runner.py); the
script reads its metrics.json, prints images/s of every run and each DDP run's ratio to the single
GPU, and writes to --out as each run ends: ddp.log (commands and output), ddp.jsonl (every run) and
ddp.md (the table). Exit code 1 when a run failed or was skipped.
``--variant "NAME:KEY=VALUE KEY=VALUE"`` adds a DDP run with those overrides (space-separated, e.g.
bf16 gradient compression); a variant whose key this fastpipe's config does not have is a row
'skipped: key not in this fastpipe' (so a list of levers can name keys still being added).
``--profile`` adds a DDP run under profile=on, whose rank-0 trace lands in runs/profile/profile/
(benchmarks/lib/trace_summary.py reads it). Each run starts in an empty folder. ``--deadline`` skips the
runs that no longer fit.

    PYTHONPATH=/tmp/site:$PWD python3 benchmarks/ddp.py --out $OUT/ddp   # 2 GPUs
    python3 benchmarks/ddp.py --out /tmp/ddp --variant "bf16:launcher.comm_hook=bf16" --profile
    python benchmarks/ddp.py --smoke --out /tmp/ddp-smoke     # CPU, TinyCNN, gloo (the test suite)

The environment is passed on as it is (PYTHONPATH, NCCL_* such as NCCL_NVLS_ENABLE=0).
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from lib.runner import (Deadline, add_common_args, append_jsonl, config_refusal, run_fastpipe, skipped, status_text,
                    write_markdown_table)


def common_overrides(a) -> list:
    """Everything both runs share: only the launcher differs between them."""
    steps = a.warmup + a.steps
    return [f"model={a.model}", "dataset=synthetic", f"dataset.image_size={a.image_size}",
            f"dataset.num_classes={a.classes}", f"dataset.num_images={a.batch * steps}",
            f"precision={a.precision}", f"compile={a.compile}", f"runtime.channels_last={str(a.channels_last).lower()}",
            f"train.batch_size={a.batch}", "train.epochs=1", f"train.max_steps={steps}",
            f"measure.warmup_steps={a.warmup}", f"measure.window={a.window}", "runtime.progress=false",
            f"device={a.device}"] + (["precision.dtype=bf16"] if a.precision == "amp" else [])


def run(name: str, overrides: list, a, log, deadline: Deadline) -> dict:
    """One fastpipe run in a fresh process through runner.py, in an empty folder: its metrics.json or
    a failed row; a skipped row when the config refuses a key (a lever this fastpipe lacks) or no time
    is left."""
    refused = config_refusal(overrides, log) if name not in ("single", "ddp") else None
    if refused:
        return skipped(f"skipped: key not in this fastpipe ({refused})")
    kind = "single" if name == "single" else "ddp"
    why = deadline.skip_reason(kind)
    if why:
        return skipped(why)
    metrics = run_fastpipe(overrides, a.out / "runs" / name, deadline.timeout(a.timeout), log)
    deadline.record(kind, metrics.get("wall_s"))
    return metrics


COLUMNS = [("run", "run"), ("processes", lambda m: (m.get("env") or {}).get("world_size")),
           ("images/s", "throughput", ",.0f"), ("step median ms", lambda m: (m.get("step_time_ms") or {}).get("median"), ".1f"),
           ("warm-up s", "warmup_s", ".1f"), ("peak mem GB (worst rank)", "peak_mem_gb", ".2f"),
           ("GPU util %", "gpu_util", ".0f"), ("wall s", "wall_s", ".0f"), ("status", status_text)]


def write_table(a, rows: list) -> str:
    """ddp.md: one row per run (dicts with "run"), then each DDP run's ratio to the single GPU."""
    single = rows[0]
    env = next((m["env"] for m in rows if m.get("env")), {})
    title = (f"{a.model}, batch {a.batch} per process, {a.image_size} px, precision={a.precision}"
             f"{' bf16' if a.precision == 'amp' else ''}, channels_last={a.channels_last}, compile={a.compile}, "
             f"dataset=synthetic; {a.warmup} warm-up + {a.steps} measured steps per process\n"
             f"device: {env.get('device_name')} (torch {env.get('torch')}, cuda {env.get('cuda')})")
    notes = []
    for m in rows[1:]:
        if m.get("status") == "skipped":
            continue
        ratio = scaling(single, m)
        note = " (profiled: timing distorted)" if m["run"].startswith("profile") else ""
        notes.append(f"{m['run']} / single: {'n/a' if ratio is None else f'{ratio:.2f}x'} on {a.nproc} processes "
                     f"(scaling efficiency {'n/a' if ratio is None else f'{100 * ratio / a.nproc:.0f} %'}){note}")
        per_rank = (m.get("per_rank") or {}).get("throughput")
        if per_rank:
            notes.append(f"{m['run']} images/s per rank: " + ", ".join(f"{v:,.0f}" for v in per_rank if v is not None))
    return write_markdown_table(a.out / "ddp.md", rows, COLUMNS, title, notes)


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
    add_common_args(p, timeout_s=600)
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
    single = ["launcher=single"]
    runs = [("launcher=single", "single", single), (f"launcher=ddp nproc_per_node={a.nproc}", "ddp", ddp)]
    runs += [(f"ddp {name}", name, ddp + extra) for name, extra in a.variants]
    if a.profile:  # a few steps past warm-up traced on rank 0 (profile's wait covers nothing else)
        runs.append(("profile=on ddp", "profile", ddp + ["profile=on", f"profile.wait={a.warmup}", "profile.warmup=1",
                                                        f"profile.active={max(1, min(5, a.steps - 1))}"]))
    deadline = Deadline(a.deadline, floor_s=5 if a.smoke else 45)
    jsonl = a.out / "ddp.jsonl"
    jsonl.write_text("")
    rows = []
    with open(a.out / "ddp.log", "w") as log:
        log.write(f"# benchmarks/ddp.py {' '.join(sys.argv[1:])}\n# NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}\n")
        for label, folder, overrides in runs:
            rows.append(dict(run(folder, base + overrides, a, log, deadline), run=label))
            append_jsonl(jsonl, rows[-1])
            text = write_table(a, rows)  # rewritten after each run: a later timeout keeps the earlier rows
        log.write(text)
    print(text)
    return 0 if all(m.get("status") == "ok" for m in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
