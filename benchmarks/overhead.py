"""Framework overhead: fastpipe vs the hand-written loop (handloop.py), same script run.

For each model x compile mode, runs the hand loop and `python -m fastpipe dataset=synthetic ...`
(each in a fresh process through runner.py, `--repeats` times, alternating which goes first) with
the same model, batch, bf16 autocast, channels_last, fused SGD and GPU-resident synthetic data, and
prints the ratio of the median throughputs. Writes to --out, as each run ends: overhead.jsonl (every
run), overhead.md (the table) and overhead.log (commands and output).

    python benchmarks/overhead.py --out /tmp/o                      # on a GPU
    python benchmarks/overhead.py --out /tmp/o --smoke              # CPU, tiny, for the tests
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lib.runner import (Deadline, add_common_args, append_jsonl, median, run_fastpipe, run_json, skipped,
                    write_markdown_table)

HERE = Path(__file__).resolve().parent


def hand_command(model: str, mode: str, a) -> list:
    return [sys.executable, str(HERE / "lib" / "handloop.py"), "--model", model, "--batch", a.batch,
            "--image-size", a.image_size, "--compile", mode, "--warmup", a.warmup, "--steps", a.steps,
            "--device", a.device, "--classes", a.classes]


def fastpipe_overrides(model: str, mode: str, a) -> list:
    # max_steps = warm-up + measured steps, all in one epoch; SGD as the hand loop (fastpipe's default is AdamW).
    return [f"model={model}", "dataset=synthetic", "optimizer=sgd", "precision=amp", "precision.dtype=bf16",
            f"compile={mode}", f"train.batch_size={a.batch}", f"dataset.image_size={a.image_size}",
            f"dataset.num_classes={a.classes}", f"dataset.num_images={a.batch * (a.warmup + a.steps)}",
            f"train.max_steps={a.warmup + a.steps}", f"measure.warmup_steps={a.warmup}",
            f"measure.window={a.window}", "runtime.progress=false", f"device={'cpu' if a.device == 'cpu' else 'cuda'}"
            ]


def one_run(runner: str, model: str, mode: str, r: int, a, log, deadline: Deadline) -> dict:
    kind = f"{runner}-{mode}"
    why = deadline.skip_reason(kind)
    if why:
        return skipped(why)
    if runner == "hand":
        res = run_json(hand_command(model, mode, a), deadline.timeout(a.timeout), log)
    else:
        res = run_fastpipe(fastpipe_overrides(model, mode, a), a.out / "runs" / f"{model}-{mode}-{r}",
                           deadline.timeout(a.timeout), log)
    deadline.record(kind, res.get("wall_s"))
    return res


def write_table(a, rows: list) -> str:
    """One line per model x compile mode: median of each side's throughputs and their ratio."""
    groups = {}
    for row in rows:
        groups.setdefault((row["model"], row["compile"]), {"hand": [], "fastpipe": []})[row["runner"]].append(row)
    table = []
    for (model, mode), sides in groups.items():
        h = median(r["throughput"] for r in sides["hand"])
        f = median(r["throughput"] for r in sides["fastpipe"])
        runs = "; ".join(", ".join("—" if r["throughput"] is None else f"{r['throughput']:,.0f}" for r in sides[s])
                         for s in ("hand", "fastpipe"))
        problems = sorted({r["reason"] for s in sides.values() for r in s if r["status"] != "ok"})
        table.append({"model": model, "compile": mode, "hand": h, "fastpipe": f, "runs": runs,
                      "ratio": f"{f / h:.3f}x" if h and f else "n/a", "status": "; ".join(problems) or "ok"})
    title = (f"batch {a.batch}, {a.image_size} px, bf16 autocast, channels_last on CUDA, fused SGD, synthetic "
             f"device-resident data; {a.warmup} warm-up + {a.steps} timed steps; median of {a.repeats}")
    columns = [("model", "model"), ("compile", "compile"), ("hand loop img/s", "hand", ",.0f"),
               ("fastpipe img/s", "fastpipe", ",.0f"), ("fastpipe / hand", "ratio"),
               ("all runs (hand; fastpipe)", "runs"), ("status", "status")]
    return write_markdown_table(a.out / "overhead.md", table, columns, title)


def main(argv=None) -> int:
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
    add_common_args(p, timeout_s=600)
    a = p.parse_args(argv)
    if a.smoke:  # bf16 autocast on a CPU without bf16 units: about 0.45 CPU-s per image per step
        a.models, a.compile, a.batch, a.image_size, a.classes = "resnet18", "off", 2, 32, 10
        a.warmup, a.steps, a.window, a.device = 1, 2, 2, "cpu"
    a.out = a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    deadline = Deadline(a.deadline, floor_s=5 if a.smoke else 30)
    jsonl = a.out / "overhead.jsonl"
    jsonl.write_text("")
    rows = []
    with open(a.out / "overhead.log", "w") as log:
        for model in a.models.split(","):
            for mode in a.compile.split(","):
                for r in range(a.repeats):
                    order = ("hand", "fastpipe") if r % 2 == 0 else ("fastpipe", "hand")  # no side always first
                    for runner in order:
                        res = one_run(runner, model, mode, r, a, log, deadline)
                        row = {"model": model, "compile": mode, "runner": runner, "repeat": r,
                               "throughput": res.get("throughput"), "status": res.get("status", "failed"),
                               "reason": res.get("reason"), "warmup_s": res.get("warmup_s"), "wall_s": res.get("wall_s")}
                        rows.append(row)
                        append_jsonl(jsonl, row)
                        text = write_table(a, rows)
    print(text)
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
