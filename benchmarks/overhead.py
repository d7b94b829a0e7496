"""Framework overhead: fastpipe vs the hand-written loop (handloop.py), same script run.

For each model x compile mode, runs the hand loop and `python -m fastpipe dataset=synthetic ...`
(each in a fresh process, alternating, `--repeats` times) with the same model, batch, bf16
autocast, channels_last, fused SGD and GPU-resident synthetic data, and prints the ratio of the
median throughputs. Writes overhead.jsonl (every run) and overhead.md (the table) to --out.

    python benchmarks/overhead.py --out results/overhead            # on a GPU
    python benchmarks/overhead.py --out /tmp/o --smoke              # CPU, tiny, for the tests
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(cmd, log) -> dict:
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log.write(proc.stdout[-4000:] + proc.stderr[-4000:] + "\n")
    log.flush()
    if proc.returncode != 0:
        return {"status": "failed", "reason": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return proc


def hand(model, compile_mode, a, log) -> dict:
    cmd = [sys.executable, str(HERE / "handloop.py"), "--model", model, "--batch", str(a.batch),
           "--image-size", str(a.image_size), "--compile", compile_mode, "--warmup", str(a.warmup),
           "--steps", str(a.steps), "--device", a.device, "--classes", str(a.classes)]
    proc = run(cmd, log)
    return proc if isinstance(proc, dict) else json.loads(proc.stdout.strip().splitlines()[-1])


def fastpipe(model, compile_mode, a, log, run_dir: Path) -> dict:
    # max_steps = warm-up + measured steps, all in one epoch; windows of 10 steps.
    cmd = [sys.executable, "-m", "fastpipe", f"model={model}", "dataset=synthetic", "optimizer=sgd", "precision=amp",
           "precision.dtype=bf16", f"compile={compile_mode}", f"train.batch_size={a.batch}",
           f"dataset.image_size={a.image_size}", f"dataset.num_classes={a.classes}",
           f"dataset.num_images={a.batch * (a.warmup + a.steps)}", f"train.max_steps={a.warmup + a.steps}",
           f"measure.warmup_steps={a.warmup}", f"measure.window={a.window}", "runtime.progress=false",
           f"device={'cpu' if a.device == 'cpu' else 'cuda'}", f"hydra.run.dir={run_dir}"]
    proc = run(cmd, log)
    if isinstance(proc, dict):
        return proc
    return json.loads((run_dir / "metrics.json").read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--models", default="resnet18,resnet50")
    p.add_argument("--compile", default="off,default")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--window", type=int, default=10)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--device", default="cuda")
    p.add_argument("--smoke", action="store_true", help="CPU, resnet18 at 32 px, a few steps")
    a = p.parse_args()
    if a.smoke:
        a.models, a.compile, a.batch, a.image_size, a.classes = "resnet18", "off", 4, 32, 10
        a.warmup, a.steps, a.window, a.device = 2, 4, 2, "cpu"
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with open(a.out / "overhead.log", "w") as log, open(a.out / "overhead.jsonl", "w") as jl:
        for model in a.models.split(","):
            for mode in a.compile.split(","):
                results = {"hand": [], "fastpipe": []}
                for r in range(a.repeats):
                    h = hand(model, mode, a, log)
                    f = fastpipe(model, mode, a, log, a.out / "runs" / f"{model}-{mode}-{r}")
                    for name, res in (("hand", h), ("fastpipe", f)):
                        jl.write(json.dumps({"model": model, "compile": mode, "runner": name, "repeat": r,
                                             "throughput": res.get("throughput"), "status": res.get("status", "ok"),
                                             "reason": res.get("reason"), "warmup_s": res.get("warmup_s")}) + "\n")
                        if res.get("throughput"):
                            results[name].append(res["throughput"])
                hand_med = statistics.median(results["hand"]) if results["hand"] else None
                fp_med = statistics.median(results["fastpipe"]) if results["fastpipe"] else None
                rows.append((model, mode, hand_med, fp_med, fp_med / hand_med if hand_med and fp_med else None,
                             results))
    lines = [f"batch {a.batch}, {a.image_size} px, bf16 autocast, channels_last on CUDA, fused SGD, "
             f"synthetic device-resident data; {a.warmup} warm-up + {a.steps} timed steps; median of {a.repeats}",
             "", "| model | compile | hand loop img/s | fastpipe img/s | fastpipe / hand | all runs (hand; fastpipe) |",
             "| --- | --- | ---: | ---: | ---: | --- |"]
    fmt = lambda v: "failed" if v is None else f"{v:,.0f}"
    for model, mode, h, f, ratio, res in rows:
        runs = ", ".join(f"{v:,.0f}" for v in res["hand"]) + "; " + ", ".join(f"{v:,.0f}" for v in res["fastpipe"])
        lines.append(f"| {model} | {mode} | {fmt(h)} | {fmt(f)} | {'n/a' if ratio is None else f'{ratio:.3f}x'} | {runs} |")
    table = "\n".join(lines)
    (a.out / "overhead.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
