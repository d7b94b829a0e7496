"""Large models on one H200: fp8 against bf16 (1.3B and GPT-2 small), a 10B GPT's build, the batch search.

Each phase is one device call (at most 10 minutes), in priority order; every run is a fresh process
through runner.py, rows written the moment each run ends; a phase starts no run its --deadline cannot
hold.

  1 (about 9 min) the 1.3B pair: lm.py --model gpt_1b --batch 8, random tokens of a 50,304 vocabulary:
    fastpipe model=gpt_1b in bf16 and with precision=fp8 (tensorwise), three runs each in alternating
    order; the table has fp8's median against bf16's and every run's tokens/s (the spread). The hand
    loop is lm.py's own default (bf16 against the hand loop: docs/performance.md).
  2 (about 3 min) the batch-size search's time (model=resnet50 dataset=synthetic precision=amp
    compile=off train.batch_size=auto train.max_steps=60), then a 10B GPT's build on the GPU (32 x
    5,120, activation checkpointing, SGD without momentum so that one GPU holds it, 3 steps).
  3 (about 5 min; 2 with --loss-model gpt2_small) fp8's held-out loss against bf16's after --loss-steps
    steps of --loss-model on the byte corpus (dataset=tokens dataset.seq_len=1024), bf16 first.
  4 (about 2 min) GPT-2 small in fp8 against bf16 (lm.py, one run each): where fp8 does not pay.
  5 (about 5 min) compile_reuse.py --gpu: what a compiled ResNet-50 probe costs, eager and cold, and
    what its Inductor cache saves the full run.

Writes to --out/pN (at most 8 files): large_models.md (the short table, printed last),
large_models.jsonl (every row), large_models.log (every command and its output), runs.tgz (each run's
metrics.json and graph.txt, and the called script's own files), and lm.md or compile_reuse.md (that
script's table: medians, the ratios to the hand loop and to bf16). ``--smoke`` runs phases on the CPU
with tiny models (the test suite runs 2 and 3): it checks the commands, not speed.

    bash .devwheels/base/install.sh && export PYTHONPATH=/tmp/site:$PWD
    python benchmarks/large_models.py --phase 1 --out $OUT --deadline 540
    python benchmarks/large_models.py --phase 2,3 --out /tmp/p3 --smoke
"""
from __future__ import annotations

import argparse
import sys
import tarfile
from pathlib import Path

import lm
from lib.runner import Deadline, append_jsonl, read_jsonl, run_command, run_fastpipe, skipped, write_markdown_table

HERE = Path(__file__).resolve().parent
SEARCH = ["model=resnet50", "dataset=synthetic", "precision=amp", "compile=off", "train.batch_size=auto",
          "train.max_steps=60"]
BIG = ["task=lm", "model=gpt", "model.n_layer=32", "model.n_head=40", "model.n_embd=5120",
       "model.activation_checkpointing=true", "dataset=synthetic", "dataset.vocab_size=50304",
       "dataset.seq_len=1024", "dataset.num_images=8", "precision=amp", "compile=off", "optimizer=sgd",
       "optimizer.momentum=0", "optimizer.weight_decay=0", "train.batch_size=1", "train.epochs=1",
       "train.max_steps=3", "measure.warmup_steps=1", "measure.window=1", "train.save_weights=false"]
SMOKE_SEARCH = ["model=tiny_cnn", "dataset.num_images=240", "dataset.image_size=16", "precision=fp32",
                "compile=off", "train.batch_size=auto", "train.batch_size_max=64", "train.max_steps=4"]
SMOKE_BIG = [o for o in BIG if not o.startswith(("model.n_", "dataset.vocab", "dataset.seq"))] + [
    "model.n_layer=2", "model.n_head=2", "model.n_embd=64", "dataset.vocab_size=256", "dataset.seq_len=32"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--phase", required=True, help="1-5, or several in order: 2,3")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--deadline", type=float, default=540, help="seconds the phases may take (default 540)")
    p.add_argument("--loss-model", default="gpt_1b", help="phase 2's model for the fp8-vs-bf16 loss (a conf/model)")
    p.add_argument("--loss-steps", type=int, default=500)
    p.add_argument("--smoke", action="store_true", help="CPU, tiny models, a few steps: checks the script")
    a = p.parse_args(argv)
    a.phases = [int(n) for n in a.phase.split(",")]
    if not a.phases or any(n not in range(1, 6) for n in a.phases):
        p.error(f"--phase {a.phase}: give phases 1-5, e.g. 1 or 2,3")
    return a


def lm_rows(a, folder: Path, deadline: Deadline, log, extra: list) -> list:
    """lm.py in this process (its runs are fresh processes), into ``folder``; its table's rows."""
    args = ["--out", str(folder), "--deadline", str(max(1, deadline.left())), *extra]
    lm.main(args + (["--smoke"] if a.smoke else []))
    rows = []
    for row in read_jsonl(folder / "lm.jsonl"):
        rows.append({"what": f"{folder.name}: {row['run']} #{row['repeat']}", "status": row.get("status"),
                     "reason": row.get("reason"), "tokens_per_s": row.get("tokens_per_s"), "mfu": row.get("mfu"),
                     "warmup_s": row.get("warmup_s"), "wall_s": row.get("wall_s"), "peak_mem_gb": row.get("peak_mem_gb")})
    table = folder / "lm.md"
    if table.exists():  # lm.py's own table (medians, vs hand, vs bf16) beside large_models.md
        (folder.parent / "lm.md").write_text(table.read_text())
    log.write(table.read_text() if table.exists() else "lm.py wrote no table\n")
    return rows


def fastpipe_row(what: str, overrides: list, run_dir: Path, deadline: Deadline, log, timeout: float) -> dict:
    why = deadline.skip_reason(what)
    if why:
        return skipped(why, what=what)
    res = run_fastpipe(overrides + ["runtime.progress=false"], run_dir, deadline.timeout(timeout), log)
    deadline.record(what, res.get("wall_s"))
    search = res.get("batch_size_search") or {}
    return {"what": what, "status": res.get("status"), "reason": res.get("reason"), "wall_s": res.get("wall_s"),
            "tokens_per_s": res.get("tokens_per_s"), "throughput": res.get("throughput"), "mfu": res.get("mfu"),
            "warmup_s": res.get("warmup_s"), "peak_mem_gb": res.get("peak_mem_gb"),
            "model_build_s": res.get("model_build_s"), "val_loss": res.get("val_loss"),
            "search_s": search.get("seconds"), "chosen": search.get("chosen"), "probes": search.get("probe_count"),
            "device": (res.get("env") or {}).get("device_name")}


def loss_runs(a, out: Path, deadline: Deadline, log) -> list:
    """fp8's held-out loss against bf16's after the same steps on the byte corpus."""
    model = "gpt_tiny" if a.smoke else a.loss_model
    steps, batch = (6, 4) if a.smoke else (a.loss_steps, 8)
    seq = 32 if a.smoke else 1024
    common = ["task=lm", "dataset=tokens", f"dataset.seq_len={seq}", f"dataset.windows_per_epoch={steps * batch}",
              f"model={model}", "optimizer=adamw", "optimizer.lr=6e-4", "optimizer.betas=[0.9,0.95]",
              "optimizer.weight_decay=0.1", "train.clip_grad_norm=1.0", f"train.batch_size={batch}",
              "train.epochs=1", f"train.max_steps={steps}", "measure.warmup_steps=5", "measure.window=10"]
    compiled = ["compile=default", "compile.backend=eager"] if a.smoke else ["compile=default"]  # smoke: Dynamo only
    if a.smoke:  # a small corpus: the standard library's held-out windows take minutes to evaluate on a CPU
        corpus = out / "corpus"
        corpus.mkdir(exist_ok=True)
        for name in ("doc0", "doc1", "doc2", "doc10"):  # doc10 is held out at dataset.val_fraction=0.05
            (corpus / f"{name}.txt").write_text("".join(f"{name} {i}: the quick brown fox jumps over the lazy dog\n"
                                                        for i in range(100)))
        common.append(f"dataset.files={corpus}/*.txt")
    rows = []
    for name, precision in (("bf16", ["precision=amp", "precision.dtype=bf16"] + compiled), ("fp8", ["precision=fp8"] + compiled)):
        rows.append(fastpipe_row(f"loss {model} {name}", common + precision, out / "runs" / f"loss-{name}", deadline,
                                 log, 400))
    bf16, fp8 = (r.get("val_loss") for r in rows)
    if bf16 and fp8:
        rows[1]["loss_vs_bf16"] = f"{100 * (fp8 - bf16) / bf16:+.2f} %"
    return rows


def phase_rows(a, phase: int, out: Path, deadline: Deadline, log) -> list:
    device = ["device=cpu", "launcher.fresh_process=false"] if a.smoke else []
    if phase == 1:
        extra = ["--model", "gpt_1b", "--batch", "8", "--repeats", "3", "--fp8-repeats", "3", "--no-hand",
                 "--timeout", "300"]
        return lm_rows(a, out / "lm1b", deadline, log, extra if not a.smoke else ["--repeats", "1", "--fp8-repeats", "1"])
    if phase == 2:
        return [fastpipe_row("batch search resnet50", (SMOKE_SEARCH if a.smoke else SEARCH) + device,
                             out / "runs" / "search", deadline, log, 240),
                fastpipe_row("10B GPT build", (SMOKE_BIG if a.smoke else BIG) + device, out / "runs" / "build10b",
                             deadline, log, 240)]
    if phase == 3:
        return loss_runs(a, out, deadline, log)
    if phase == 4:
        extra = ["--model", "gpt2_small", "--batch", "32", "--repeats", "1", "--fp8-repeats", "1", "--no-hand"]
        return lm_rows(a, out / "gpt2small", deadline, log, extra if not a.smoke else ["--repeats", "1", "--fp8-repeats", "1",
                                                                             "--no-hand"])
    return reuse_rows(a, out / "reuse", deadline, log)


def reuse_rows(a, folder: Path, deadline: Deadline, log) -> list:
    """compile_reuse.py (its runs are fresh processes), into ``folder``."""
    import compile_reuse

    args = ["--out", str(folder), "--deadline", str(max(1, deadline.left()))]
    compile_reuse.main(args + ([] if a.smoke else ["--gpu"]) + (["--probe-steps", "3", "--full-steps", "6",
                                                                  "--warmup", "2"] if a.smoke else []))
    table = folder / "compile_reuse.md"
    if table.exists():
        (folder.parent / "compile_reuse.md").write_text(table.read_text())
    log.write(table.read_text() if table.exists() else "compile_reuse.py wrote no table\n")
    return [{"what": f"reuse: {r['run']}", "status": r.get("status"), "reason": r.get("reason"),
             "wall_s": r.get("wall_s"), "warmup_s": r.get("warmup_s"), "throughput": r.get("throughput")}
            for r in read_jsonl(folder / "compile_reuse.jsonl")]


def archive(out: Path) -> None:
    """runs.tgz: every run's metrics.json and graph.txt, and lm.py's tables and logs (no checkpoints)."""
    with tarfile.open(out / "runs.tgz", "w:gz") as tar:
        for path in sorted(out.rglob("*")):
            if path.is_file() and (path.name in ("metrics.json", "graph.txt", "__main__.log")
                                   or path.suffix in (".md", ".jsonl", ".log")) and path.parent != out:
                tar.add(path, arcname=str(path.relative_to(out)))


def main(argv=None) -> int:
    a = parse_args(argv)
    deadline = Deadline(a.deadline, floor_s=5 if a.smoke else 60)
    ok = True
    for phase in a.phases:
        ok &= run_phase(a, phase, deadline)
    return 0 if ok else 1


def run_phase(a, phase: int, deadline: Deadline) -> bool:
    out = (a.out / f"p{phase}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / "large_models.jsonl"
    jsonl.write_text("")
    with open(out / "large_models.log", "w") as log:
        if not a.smoke:  # the machine, for the log (each run's metrics.json has it too)
            run_command(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                         "--format=csv"], 30, log)
        rows = phase_rows(a, phase, out, deadline, log)
    for row in rows:
        append_jsonl(jsonl, row)
    archive(out)
    columns = [("run", "what"), ("tokens/s", "tokens_per_s", ",.0f"), ("samples/s", "throughput", ",.1f"),
               ("MFU %", lambda r: None if r.get("mfu") is None else 100 * r["mfu"], ".1f"),
               ("warm-up s", "warmup_s", ".1f"), ("build s", "model_build_s", ".2f"),
               ("search s", "search_s", ".1f"), ("chosen", "chosen"), ("probes", "probes"),
               ("val loss", "val_loss", ".4f"), ("vs bf16", "loss_vs_bf16"), ("peak GB", "peak_mem_gb", ".1f"),
               ("wall s", "wall_s", ".0f"), ("status", lambda r: "ok" if r.get("status") == "ok" else
                                             f"{r.get('status')}: {r.get('reason')}")]
    text = write_markdown_table(out / "large_models.md", rows, columns, f"large_models phase {phase}"
                                + (" (smoke: CPU, tiny models)" if a.smoke else ""))
    print(text)
    return all(r.get("status") == "ok" for r in rows)


if __name__ == "__main__":
    sys.exit(main())
