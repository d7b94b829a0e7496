"""Language modelling: fastpipe's GPT training vs the hand-written loop (lm_handloop.py), tokens/s.

Same model (fastpipe.models.GPT at the --model config's shape), batch, sequence, random
device-resident tokens (dataset=synthetic), bf16 autocast, compile mode and fused AdamW (lr 6e-4,
betas 0.9/0.95, weight decay 0.1, none on biases and norm weights) on both sides, each run a fresh
process through runner.py, `--repeats` times, alternating which goes first. `--nproc N` adds
fastpipe on N GPUs per `--launcher` (ddp; fsdp where this fastpipe has launcher=fsdp, else a row
'not available'), for the scaling ratio against fastpipe on one GPU. Writes to --out, as each run
ends: lm.jsonl (every run), lm.md (the table: median tokens/s, the ratio to the hand loop, MFU, the
scaling ratio) and lm.log (commands and output).

    python benchmarks/lm.py --out /tmp/lm                                   # GPT-2 small, one GPU
    python benchmarks/lm.py --out /tmp/lm2 --nproc 2 --launcher ddp,fsdp --no-hand
    python benchmarks/lm.py --out /tmp/lm --smoke                           # CPU, gpt_tiny, for the tests
    python benchmarks/lm.py --out /tmp/big --shape 32,40,5120 --activation-checkpointing --batch 4 \
        --compile off --no-hand --nproc 2 --launcher ddp,fsdp             # 10B: one GPU and DDP run out of memory
    python benchmarks/lm.py --out /tmp/1b --model gpt_1b --batch 8 --repeats 1 --fp8-repeats 3   # + precision=fp8

`--fp8-repeats N` adds N runs of fastpipe with precision=fp8 (torchao float8 training, tensorwise, every
Linear but the tied head) beside its bf16 run; the table's "vs bf16" is their median against fastpipe's
bf16 median (MFU of both against the bf16 peak).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lib.runner import (Deadline, add_common_args, append_jsonl, config_refusal, run_fastpipe, run_json, skipped,
                    summarize, write_markdown_table)

HERE = Path(__file__).resolve().parent
SHAPES = {"gpt2_small": (12, 12, 768), "gpt2_medium": (24, 16, 1024), "gpt2_large": (36, 20, 1280),
          "gpt_1b": (24, 16, 2048), "gpt_tiny": (4, 4, 128)}  # (layers, heads, width) of conf/model/*.yaml


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", default="gpt2_small", choices=sorted(SHAPES))
    p.add_argument("--shape", help="LAYERS,HEADS,WIDTH: model=gpt at this shape instead of --model (a larger GPT)")
    p.add_argument("--activation-checkpointing", action="store_true", help="model.activation_checkpointing=true")
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--batch", type=int, default=32, help="sequences per step, per GPU")
    p.add_argument("--compile", default="default", choices=["off", "default", "reduce-overhead", "max-autotune"])
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--steps", type=int, default=100, help="measured steps")
    p.add_argument("--window", type=int, default=10)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--fp8-repeats", type=int, default=0, help="runs of fastpipe with precision=fp8 (beside bf16)")
    p.add_argument("--fp8-recipe", default="tensorwise", choices=["tensorwise", "rowwise"])
    p.add_argument("--nproc", type=int, default=1, help="> 1: also fastpipe on this many GPUs per --launcher")
    p.add_argument("--launcher", help="comma-separated launchers run with --nproc processes (ddp, fsdp); "
                   "default: ddp when --nproc > 1, else none")
    p.add_argument("--no-hand", action="store_true", help="no hand-loop runs (a scaling-only call)")
    p.add_argument("--no-single", action="store_true", help="no fastpipe launcher=single run")
    p.add_argument("--device", default="cuda")
    p.add_argument("--smoke", action="store_true", help="CPU, gpt_tiny at 32 tokens, eager, a few steps")
    add_common_args(p, timeout_s=600)
    a = p.parse_args(argv)
    if a.smoke:
        a.model, a.vocab, a.seq_len, a.batch, a.compile = "gpt_tiny", 256, 32, 4, "off"
        a.warmup, a.steps, a.window, a.device = 2, 4, 2, "cpu"
        a.fp8_compile = ["compile=default", "compile.backend=aot_eager"]  # fp8 needs compile; cheap on a CPU
    else:
        a.fp8_compile = [f"compile={'default' if a.compile == 'off' else a.compile}"]
    if a.shape:
        layers, heads, width = (int(v) for v in a.shape.split(","))
        a.model = f"gpt_{layers}x{width}"
        SHAPES[a.model] = (layers, heads, width)
    default = "ddp" if a.nproc > 1 else ""
    a.launchers = [name for name in (a.launcher if a.launcher is not None else default).split(",") if name]
    return a


def model_overrides(a) -> list:
    """A conf/model choice, or model=gpt at --shape's size; activation checkpointing if asked."""
    if a.shape:
        layers, heads, width = SHAPES[a.model]
        chosen = ["model=gpt", f"model.n_layer={layers}", f"model.n_head={heads}", f"model.n_embd={width}"]
    else:
        chosen = [f"model={a.model}"]
    return chosen + (["model.activation_checkpointing=true"] if a.activation_checkpointing else [])


def fastpipe_overrides(a, fp8: bool = False) -> list:
    """One GPU's (or one process's) run: only the launcher (or precision=fp8) differs between the fastpipe rows."""
    precision = ["precision=fp8", f"precision.recipe={a.fp8_recipe}", *a.fp8_compile] if fp8 else \
        ["precision=amp", "precision.dtype=bf16", f"compile={a.compile}"]
    return ["task=lm"] + model_overrides(a) + ["dataset=synthetic", f"dataset.vocab_size={a.vocab}",
            f"dataset.seq_len={a.seq_len}", f"dataset.num_images={a.batch * (a.warmup + a.steps)}",
            *precision, "optimizer=adamw", "optimizer.lr=6e-4",
            "optimizer.betas=[0.9,0.95]", "optimizer.weight_decay=0.1", f"train.batch_size={a.batch}",
            "train.epochs=1", f"train.max_steps={a.warmup + a.steps}", f"measure.warmup_steps={a.warmup}",
            f"measure.window={a.window}", "runtime.progress=false", f"device={'cpu' if a.device == 'cpu' else 'cuda'}"]


def hand_command(a) -> list:
    layers, heads, width = SHAPES[a.model]
    return [sys.executable, str(HERE / "lib" / "lm_handloop.py"), "--batch", a.batch, "--seq-len", a.seq_len,
            "--vocab", a.vocab, "--layers", layers, "--heads", heads, "--width", width, "--compile", a.compile,
            "--warmup", a.warmup, "--steps", a.steps, "--window", a.window, "--device", a.device,
            *(["--smoke"] if a.smoke else [])]  # the same tiny GPT: the suite reads its JSON line in lm.log


FP8 = "fastpipe fp8"


def runs_of(a, r: int = 0) -> list:
    """(name, processes, how) of repeat ``r``: the hand loop, fastpipe on one GPU, each launcher (while
    ``r`` < --repeats), then fastpipe with precision=fp8 (while ``r`` < --fp8-repeats)."""
    single = ["launcher=single"] + (["launcher.fresh_process=false"] if a.smoke else [])
    runs = [] if a.no_hand else [("hand", 1, None)]
    if not a.no_single:
        runs.append(("fastpipe", 1, single))
    runs += [(f"fastpipe {name}", a.nproc, [f"launcher={name}", f"launcher.nproc_per_node={a.nproc}"])
             for name in a.launchers]
    runs = runs if r < a.repeats else []
    return runs + ([(FP8, 1, single)] if r < a.fp8_repeats else [])


def one_run(name: str, how, r: int, a, log, deadline: Deadline, unavailable: dict) -> dict:
    if name in unavailable:
        return skipped(unavailable[name])
    why = deadline.skip_reason(name)
    if why:
        return skipped(why)
    if how is None:
        res = run_json(hand_command(a), deadline.timeout(a.timeout), log)
    else:
        res = run_fastpipe(fastpipe_overrides(a, fp8=name == FP8) + how, a.out / "runs" / f"{name.replace(' ', '-')}-{r}",
                           deadline.timeout(a.timeout), log)
    deadline.record(name, res.get("wall_s"))
    return res


def row_of(name: str, processes: int, r: int, res: dict) -> dict:
    step = res.get("step_ms_median") or (res.get("step_time_ms") or {}).get("median")
    return {"run": name, "processes": processes, "repeat": r, "tokens_per_s": res.get("tokens_per_s"),
            "step_ms_median": step, "mfu": res.get("mfu"), "peak_mem_gb": res.get("peak_mem_gb"),
            "warmup_s": res.get("warmup_s"), "wall_s": res.get("wall_s"), "status": res.get("status", "failed"),
            "reason": res.get("reason"), "device": res.get("device") or (res.get("env") or {}).get("device_name"),
            "torch": res.get("torch") or (res.get("env") or {}).get("torch")}


def write_table(a, rows: list) -> str:
    """One line per run kind: medians over repeats; fastpipe against the hand loop, N GPUs against one."""
    names = list(dict.fromkeys(r["run"] for r in rows))
    summary = []
    for name in names:
        mine = [r for r in rows if r["run"] == name]
        line = summarize(mine, ("tokens_per_s", "step_ms_median", "mfu", "peak_mem_gb", "warmup_s"), "tokens_per_s")
        summary.append(dict(line, run=name, processes=mine[0]["processes"],
                            mfu_pct=None if line["mfu"] is None else 100 * line["mfu"]))
    by_name = {s["run"]: s for s in summary}

    def ratio(s, base_name):
        base = by_name.get(base_name, {}).get("tokens_per_s")
        return f"{s['tokens_per_s'] / base:.3f}x" if base and s["tokens_per_s"] and s["run"] != base_name else ""

    for s in summary:
        s["vs_hand"] = ratio(s, "hand") if s["processes"] == 1 else ""
        s["vs_one"] = ratio(s, "fastpipe") if s["processes"] > 1 else ""
        s["vs_bf16"] = ratio(s, "fastpipe") if s["run"] == FP8 else ""
    device = next((r["device"] for r in rows if r.get("device")), "?")
    torch_version = next((r["torch"] for r in rows if r.get("torch")), "?")
    layers, heads, width = SHAPES[a.model]
    title = (f"{a.model} ({layers} layers, {heads} heads, {width} wide), vocabulary {a.vocab}, {a.seq_len} tokens, "
             f"batch {a.batch} per GPU, bf16 autocast, compile={a.compile}"
             f"{f' (fp8: torchao float8 {a.fp8_recipe}, every Linear but the tied head, MFU against the bf16 peak)' if a.fp8_repeats else ''}"
             f"{', activation checkpointing per block' if a.activation_checkpointing else ''}, fused AdamW lr 6e-4; random "
             f"device-resident tokens; {a.warmup} warm-up + {a.steps} measured steps; median of {a.repeats} "
             f"(alternating order); device {device}, torch {torch_version}")
    columns = [("run", "run"), ("GPUs", "processes"), ("tokens/s", "tokens_per_s", ",.0f"), ("all runs", "runs"),
               ("vs hand", "vs_hand"), ("vs 1 GPU", "vs_one"), *([("vs bf16", "vs_bf16")] if a.fp8_repeats else []),
               ("step ms", "step_ms_median", ".1f"), ("MFU %", "mfu_pct", ".1f"),
               ("peak mem GB", "peak_mem_gb", ".1f"), ("warm-up s", "warmup_s", ".1f"), ("status", "status")]
    return write_markdown_table(a.out / "lm.md", summary, columns, title)


def main(argv=None) -> int:
    a = parse_args(argv)
    a.out = a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    deadline = Deadline(a.deadline, floor_s=5 if a.smoke else 60)
    jsonl = a.out / "lm.jsonl"
    jsonl.write_text("")
    rows = []
    with open(a.out / "lm.log", "w") as log:
        unavailable = {}  # a launcher (or launcher key) this fastpipe does not have: one clear row, no run
        for name, processes, how in runs_of(a):
            refused = config_refusal(fastpipe_overrides(a) + how, log) if processes > 1 else None
            if refused:
                unavailable[name] = f"not available: {' '.join(how)} is not in this fastpipe ({refused})"
        for r in range(max(a.repeats, a.fp8_repeats)):
            runs = runs_of(a, r)
            if r % 2:  # alternate: no side always runs first (warmer caches, a cooler GPU)
                runs.reverse()
            for name, processes, how in runs:
                row = row_of(name, processes, r, one_run(name, how, r, a, log, deadline, unavailable))
                rows.append(row)
                append_jsonl(jsonl, row)
                text = write_table(a, rows)
    print(text)
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
