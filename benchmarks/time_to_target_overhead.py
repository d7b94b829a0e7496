"""The clock is for training (issue 36): start-up against a hand loop, where the time to 90 % goes, the batch search.

On one H200, in two phases of one `device` call each (the machine keeps /tmp while warm; a phase that
finds no data prepares it first):

1. the shapes set at 224 px (51,200 JPEGs of 500x375, `time_to_target.sh --machine h200`'s) and its
   data=mmap pack, by one step of a tiny model; then, twice each, alternating, a hand-written loop's time from
   its process's start to its first batch on the GPU (torchvision ImageFolder + DataLoader with W
   workers, ResNet-50 built on the GPU: `hand` below) and fastpipe's start-up (its job's start to the
   start of its first step: the sum of metrics.json's `setup_parts_s`) for ResNet-50 amp compile=off
   with data=mmap and with data=default (W workers); then `--sampled` more of each (hand loop,
   data=mmap, data=default) under lib/sampler (every Python process's stacks every 10 ms: not counted
   in the table, whose runs are not sampled), each written as `timeline-<kind>.txt`; then
   train.batch_size=auto for ResNet-50 synthetic amp compile=off, its probes as it printed them;
2. the four jobs of that script's grid without its resize axis (compile off/default x batch
   256/512, SGD lr 0.1 scaled linearly, amp, data=mmap) to 90 % held-out accuracy with
   `train.eval_every=25 train.target_eval_samples=2048`, as one sweep with an empty Inductor cache:
   each job's `time_breakdown_s` (setup, compile, train, eval, checkpoint, wall) and its end-to-end
   time to target over its `time_breakdown_s.train`; then the compile=off batch-256 job alone twice,
   with each of `--pair`'s two settings (by default `train.eval_batch_size` at the training batch, auto,
   and at twice it: what a second batch shape costs the evaluations), alternating `--eval-pairs` times.

Every run is a fresh process through lib/runner.py; each phase writes, as each run ends, `$OUT/pN/`:
`ttt_overhead.md` (its tables, printed last), `ttt_overhead.jsonl` (a row per run),
`ttt_overhead.log` (every command and its output) and `runs.tgz` (each run's metrics.json, graph.txt
and log). `--smoke` runs both phases on this CPU with a tiny model and dataset: it checks the script.
A run's files are committed under results/time-to-target-overhead/<machine>-<date>-<commit>/
(`bash benchmarks/lib/result_dir.sh time-to-target-overhead h200` makes the folder).

    bash .devwheels/base/install.sh && export PYTHONPATH=/tmp/site:$PWD && \\
        python3 benchmarks/time_to_target_overhead.py --phase 1 --out $OUT --deadline 540
    python3 benchmarks/time_to_target_overhead.py --phase all --out /tmp/ttt --smoke

`--no-search` leaves it out of phase 1; `--phase search` runs phase 1's batch search alone (writes `$OUT/psearch/`): a call of about two minutes.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tarfile
import time
from pathlib import Path

from lib.sampler.timeline import timeline
from lib.runner import (Deadline, add_common_args, append_jsonl, run_fastpipe, run_json, skipped, status_text,
                        write_markdown_table)

DATA = ["dataset=shapes", "dataset.source_size=[500,375]", "dataset.num_images=51200", "dataset.image_size=224",
        "dataset.augment=true"]
RECIPE = ["model=resnet50", "+model.zero_init_residual=true", "precision=amp", "optimizer=sgd", "optimizer.lr=0.1",
          "train.lr_scaling=linear", "train.lr_reference_batch=256", "lr_schedule.warmup_steps=10", "train.epochs=3",
          "measure.warmup_steps=10", "measure.window=10", "runtime.progress=false"]
TARGET = ["report.objective=time_to_target", "train.target=0.90", "train.eval_every=25",
          "train.target_eval_samples=2048"]
GRID = ["compile=off,default", "train.batch_size=256,512"]
SEARCH = ["model=resnet50", "dataset=synthetic", "precision=amp", "compile=off", "train.batch_size=auto",
          "train.max_steps=10", "runtime.progress=false"]
SMOKE_DATA = ["dataset=shapes", "dataset.source_size=[48,36]", "dataset.num_images=400", "dataset.image_size=32",
              "dataset.augment=true"]
SMOKE_RECIPE = ["model=tiny_cnn", "optimizer=sgd", "optimizer.lr=0.1", "train.lr_scaling=linear",
                "train.lr_reference_batch=16", "train.epochs=3", "measure.warmup_steps=2", "measure.window=2",
                "runtime.progress=false", "device=cpu"]
SMOKE_TARGET = ["report.objective=time_to_target", "train.target=0.3", "train.eval_every=4",
                "train.target_eval_samples=32", "train.max_steps=40"]
# the smoke's prep on the CPU, and its sweep's one job in the sweep's own process (no training process
# spawned for it): the smoke checks the script, not a sweep's isolation
SMOKE_IN_PROCESS = ["device=cpu", "launcher.fresh_process=false"]
PARTS = ("setup", "compile", "train", "eval", "checkpoint", "wall_s")
SAMPLER = Path(__file__).resolve().parent / "lib" / "sampler"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="each phase writes OUT/pN/")
    p.add_argument("--phase", default="1", choices=["1", "2", "all", "search"],
                   help="search: phase 1's batch search alone (no data to prepare: a short device call)")
    p.add_argument("--work", type=Path, default=Path("/tmp/fp-ttt"), help="the dataset, its pack and run folders")
    p.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1), help="DataLoader workers of both")
    p.add_argument("--repeats", type=int, default=2, help="start-up measurements of each kind")
    p.add_argument("--sampled", type=int, default=1, help="sampled start-ups of each kind, after the measured ones")
    p.add_argument("--eval-pairs", type=int, default=1, help="phase 2: --pair's runs, alternating, this many times")
    p.add_argument("--pair", default="train.eval_batch_size=auto,512",
                   help="phase 2: KEY=A,B: the compile=off batch-256 job with KEY=A and KEY=B")
    p.add_argument("--no-search", action="store_true", help="phase 1 without its batch search")
    p.add_argument("--no-grid", action="store_true", help="phase 2 without the four jobs: --pair's runs alone")
    p.add_argument("--smoke", action="store_true", help="this CPU, tiny_cnn on 400 32-px images: checks the script")
    add_common_args(p, timeout_s=540)
    a = p.parse_args(argv)
    if a.smoke:
        a.workers, a.repeats = 1, 1
    return a


class Phase:
    """One phase's files and deadline: rows appended as runs end, the tables rewritten, the runs' files packed."""

    def __init__(self, a, number: str) -> None:
        self.a, self.out = a, a.out / f"p{number}"
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = open(self.out / "ttt_overhead.log", "a")
        self.rows, self.runs = [], []
        self.env = {"FASTPIPE_CACHE": str(a.work / "fpcache"), "NCCL_NVLS_ENABLE": "0",
                    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
        os.environ.update(self.env)  # lib/runner.py passes this process's environment on

    def fastpipe(self, kind: str, overrides: list, run_dir: Path, deadline: Deadline, cap: float, **kw) -> dict:
        why = deadline.skip_reason(kind)
        row = skipped(why) if why else run_fastpipe(overrides, run_dir, deadline.timeout(cap), self.log, **kw)
        deadline.record(kind, row.get("wall_s"))
        self.runs.append(run_dir)
        return row

    def add(self, row: dict) -> None:
        self.rows.append(row)
        append_jsonl(self.out / "ttt_overhead.jsonl", {k: v for k, v in row.items() if k != "job_metrics"})
        self.pack()

    def pack(self) -> None:
        tmp = self.out / ".runs.tgz.tmp"
        with tarfile.open(tmp, "w:gz") as tar:
            for run in self.runs:
                for path in sorted(Path(run).rglob("*")):
                    if path.name in ("metrics.json", "graph.txt", "__main__.log", "summary.txt", "report.md"):
                        tar.add(path, arcname=str(path.relative_to(self.a.work)))
        tmp.replace(self.out / "runs.tgz")


def data_args(a) -> list:
    return SMOKE_DATA if a.smoke else DATA


def prepare(ph: Phase, deadline: Deadline) -> str:
    """The JPEG folder and its pack, by one step of a tiny model (skipped once done); the folder's path."""
    a, run = ph.a, ph.a.work / "prep"
    done = a.work / "prep.done"
    if not done.is_file():
        row = ph.fastpipe("prep", data_args(a) + ["model=tiny_cnn", "data=mmap", "train.max_steps=1",
                                                  "runtime.progress=false"] + (SMOKE_IN_PROCESS if a.smoke else []),
                          run, deadline, 600)
        ph.add(dict(row, name="prep (the JPEG folder and its pack)"))
        if row.get("status") == "ok":
            done.write_text((run / "graph.txt").read_text())
    found = re.search(r"root=(\S+)", done.read_text()) if done.is_file() else None
    return found.group(1) if found else ""


def hand_command(a, root: str) -> list:
    return [sys.executable, str(Path(__file__).resolve()), "hand", "--root", root, "--workers", str(a.workers),
            "--batch", "16" if a.smoke else "256", "--image-size", "32" if a.smoke else "224",
            "--model", "tiny" if a.smoke else "resnet50", "--device", "cpu" if a.smoke else "cuda"]


def start_up(ph: Phase, deadline: Deadline, root: str) -> None:
    """The hand loop's first batch and fastpipe's start-up, alternating, --repeats times each; then
    --sampled more of each under the stack sampler, each one's timeline written beside the tables."""
    a = ph.a
    base = data_args(a) + (SMOKE_RECIPE if a.smoke else RECIPE) + ["compile=off", "train.max_steps=3"]
    base += ["train.batch_size=16"] if a.smoke else ["train.batch_size=256"]
    for r in range(a.repeats + a.sampled):
        sampled = r >= a.repeats
        tag = f"-sampled-{r - a.repeats}" if sampled else f"-{r}"
        # the smoke checks the commands, not what they measure: the hand loop and data=mmap, then one
        # sampled data=mmap run (the sampled path, not what the timelines say)
        kinds = ("hand", "mmap", "default") if not a.smoke else ("mmap",) if sampled else ("hand", "mmap")
        for kind in kinds:
            samples = ph.out / f"samples-{kind}{tag}"
            env = sampler_env(samples) if sampled else None
            if kind == "hand":
                why = deadline.skip_reason("hand")
                row = skipped(why) if why else run_json(hand_command(a, root), deadline.timeout(300), ph.log, env=env)
                deadline.record("hand", row.get("wall_s"))
                row = dict(row, name=f"hand loop, first batch{' (sampled)' if sampled else ''} #{r + 1}", kind="hand")
            else:
                extra = [f"data={kind}"] + ([f"data.num_workers={a.workers}"] if kind == "default" else [])
                row = ph.fastpipe(f"start-{kind}", base + extra, a.work / f"start-{kind}{tag}", deadline, 300, env=env)
                row = dict(row, name=f"fastpipe data={kind}{' (sampled)' if sampled else ''} #{r + 1}",
                           kind=f"start-{kind}")
            if sampled:
                (ph.out / f"timeline-{kind}{tag}.txt").write_text(timeline(samples))
                shutil.rmtree(samples, ignore_errors=True)
                row["kind"] = "sampled"
            ph.add(row)


def sampler_env(folder: Path) -> dict:
    """The environment that samples every Python process a command starts (lib/sampler/sitecustomize.py)."""
    path = os.pathsep.join(p for p in (str(SAMPLER), os.environ.get("PYTHONPATH")) if p)
    return {"FASTPIPE_SAMPLE_DIR": str(folder), "PYTHONPATH": path}


def batch_search(ph: Phase, deadline: Deadline) -> None:
    a = ph.a
    overrides = (["model=tiny_cnn", "dataset=synthetic", "dataset.image_size=32", "dataset.num_images=512",
                  "train.batch_size=auto", "train.batch_size_max=64", "train.max_steps=2", "runtime.progress=false",
                  "device=cpu"] if a.smoke else SEARCH)
    m = ph.fastpipe("search", overrides, a.work / "search", deadline, 300)
    ph.add(dict(m, name="train.batch_size=auto", kind="search"))


def jobs(ph: Phase, deadline: Deadline) -> None:
    a = ph.a
    # CPU compiles take minutes: the smoke runs one job of the sweep, compile=off
    recipe = SMOKE_RECIPE + SMOKE_TARGET + ["compile=off", "train.batch_size=16"] + SMOKE_IN_PROCESS[1:] if a.smoke \
        else RECIPE + TARGET + GRID
    if a.no_grid:
        return eval_pairs(ph, deadline)
    cache = a.work / f"inductor-{int(time.time())}"  # empty: every compiled job pays its compilation
    shutil.rmtree(a.work / "jobs", ignore_errors=True)  # a sweep folder of its own: no earlier job is read
    row = ph.fastpipe("jobs", data_args(a) + recipe + ["data=mmap"], a.work / "jobs", deadline, 3600,
                      multirun=True, env={"TORCHINDUCTOR_CACHE_DIR": str(cache)})
    ph.add(dict(row, name="the four jobs to 90 %", kind="jobs"))
    for i, job in enumerate(row.get("job_metrics") or []):
        ph.add(dict(job, name=f"job {i}", kind="job"))
    eval_pairs(ph, deadline)


def eval_pairs(ph: Phase, deadline: Deadline) -> None:
    """The compile=off job at the smaller batch alone, with --pair's two values alternating --eval-pairs times."""
    a = ph.a
    recipe = (SMOKE_RECIPE + SMOKE_TARGET + ["train.batch_size=16"] if a.smoke else
              RECIPE + TARGET + ["train.batch_size=256"])
    key, values = a.pair.split("=", 1)
    for r in range(a.eval_pairs):
        for value in values.split(","):
            run_dir = a.work / f"pair-{value}-{r}"
            m = ph.fastpipe(f"pair-{value}", data_args(a) + recipe + ["compile=off", "data=mmap", f"{key}={value}"],
                            run_dir, deadline, 300)
            ph.add(dict(m, name=f"{key}={value} #{r + 1}", kind="eval-pair"))


def start_up_table(rows: list) -> str:
    hands = [r["first_batch_s"] for r in rows if r.get("kind") == "hand" and r.get("status") == "ok"]
    hand = sorted(hands)[len(hands) // 2] if hands else None
    lines = []
    for r in rows:
        if r.get("kind") not in ("hand", "start-mmap", "start-default"):
            continue
        parts = r.get("setup_parts_s") or {}
        start = r["first_batch_s"] if r["kind"] == "hand" else (sum(parts.values()) if parts else None)
        if r["kind"] == "hand" and r.get("imports_s") is not None:  # the hand loop's own two parts
            parts = {"imports": r["imports_s"], "the rest": r["first_batch_s"] - r["imports_s"]}
        top = sorted(parts.items(), key=lambda kv: -kv[1])[:3]
        lines.append({"run": r["name"], "start": start, "ratio": start / hand if start and hand else None,
                      "largest": ", ".join(f"{k} {v:.1f}" for k, v in top) or None,
                      "status": status_text(r)})
    if not lines:
        return ""
    return write_markdown_table(None, lines, [("run", "run"), ("start-up (s)", "start", ".1f"),
                                              ("over the hand loop's median", "ratio", ".2f"),
                                              ("largest parts (s)", "largest"), ("status", "status")],
                                title="## Start-up: the job's start to its first step (fastpipe), to its first "
                                      "batch on the device (hand loop)")


def reached_text(target: dict) -> str:
    """A run's reached step (``step N``) or ``no``, from its metrics.json ``target``."""
    return f"step {target.get('steps')}" if target.get("reached") else "no"


def eval_share(breakdown: dict):
    """Evaluation over the training part of a ``time_breakdown_s``, or None when either is missing."""
    return breakdown["eval"] / breakdown["train"] if breakdown.get("train") and breakdown.get("eval") is not None \
        else None


def jobs_table(rows: list) -> str:
    lines = []
    for r in rows:
        if r.get("kind") != "job":
            continue
        t, b = r.get("target") or {}, r.get("time_breakdown_s") or {}
        line = {"job": " ".join(o for o in r.get("overrides", []) if o.startswith(("compile=", "train.batch_size="))),
                "to_target": t.get("seconds_end_to_end") if t.get("reached") else None,
                "ratio": t["seconds_end_to_end"] / b["train"] if t.get("reached") and b.get("train") else None,
                "reached": reached_text(t), "status": status_text(r), "eval_share": eval_share(b)}
        lines.append({**line, **{k: b.get(k) for k in PARTS}})
    if not lines:
        return ""
    columns = [("job", "job")] + [(k.replace("_s", ""), k, ".1f") for k in PARTS] + [
        ("eval / train", "eval_share", ".0%"), ("end to end to 90 % (s)", "to_target", ".1f"),
        ("that / train", "ratio", ".2f"), ("reached", "reached"),
        ("status", "status")]
    return write_markdown_table(None, lines, columns, title="## The four jobs: time_breakdown_s (s)")


def eval_table(rows: list) -> str:
    lines = []
    for r in rows:
        if r.get("kind") != "eval-pair":
            continue
        t, b = r.get("target") or {}, r.get("time_breakdown_s") or {}
        curve = t.get("curve") or []
        lines.append({"run": r["name"], "eval": b.get("eval"), "train": b.get("train"), "evals": len(curve),
                      "share": eval_share(b), "each": b["eval"] / len(curve) if curve and b.get("eval") is not None
                      else None, "reached": reached_text(t), "status": status_text(r)})
    if not lines:
        return ""
    return write_markdown_table(None, lines, [
        ("run", "run"), ("evaluations", "evals"), ("eval (s)", "eval", ".2f"), ("per evaluation (s)", "each", ".3f"),
        ("train (s)", "train", ".1f"), ("eval / train", "share", ".1%"), ("reached", "reached"), ("status", "status")],
        title="## The compile=off job at batch 256 alone, each of a pair of settings")


def search_table(rows: list) -> str:
    r = next((r for r in rows if r.get("kind") == "search"), None)
    if r is None:
        return ""
    s = r.get("batch_size_search") or {}
    title = (f"## train.batch_size=auto: chose {s.get('chosen')} in {s.get('seconds')} s "
             f"({(r.get('setup_parts_s') or {}).get('batch_search')} s of set-up), {status_text(r)}")
    return write_markdown_table(None, s.get("probes") or [], [
        ("batch", "batch_size"), ("fits", "fits"), ("samples/s", "samples_per_s", ",.0f"),
        ("peak GB", "peak_mem_gb", ".1f"), ("seconds", "seconds", ".1f"), ("why", "why")], title=title)


def write_tables(ph: Phase) -> str:
    text = "\n".join(t for t in (start_up_table(ph.rows), search_table(ph.rows), jobs_table(ph.rows),
                                  eval_table(ph.rows)) if t)
    (ph.out / "ttt_overhead.md").write_text(text)
    return text


def run_phase(a, number: str) -> None:
    ph, deadline = Phase(a, number), Deadline(a.deadline)
    if number == "search":
        batch_search(ph, deadline)
        print(write_tables(ph), flush=True)
        return
    root = prepare(ph, deadline)
    if number == "1":
        start_up(ph, deadline, root)
        if not a.no_search:
            batch_search(ph, deadline)
    else:
        jobs(ph, deadline)
    print(write_tables(ph), flush=True)


def hand(argv) -> None:
    """The hand-written loop's start: imports, ImageFolder, DataLoader, the model on the device, the
    first batch there; one JSON line of seconds since the process started (read from /proc as
    fastpipe's own start-up is, after the measured work: the reading costs nothing inside it)."""
    p = argparse.ArgumentParser(prog="time_to_target_overhead.py hand")
    for flag, kind in (("--root", str), ("--workers", int), ("--batch", int), ("--image-size", int),
                       ("--model", str), ("--device", str)):
        p.add_argument(flag, type=kind, required=True)
    h = p.parse_args(argv)
    import torch
    import torchvision
    from torchvision import transforms

    imported_at = time.time()
    device = torch.device(h.device)
    fmt = torch.channels_last if device.type == "cuda" else torch.contiguous_format
    data = torchvision.datasets.ImageFolder(h.root, transforms.Compose([
        transforms.RandomResizedCrop(h.image_size, antialias=True), transforms.RandomHorizontalFlip(),
        transforms.PILToTensor()]))
    loader = torch.utils.data.DataLoader(data, batch_size=h.batch, shuffle=True, num_workers=h.workers,
                                         pin_memory=device.type == "cuda", drop_last=True,
                                         persistent_workers=h.workers > 0)
    model = (torchvision.models.resnet50(num_classes=len(data.classes)) if h.model == "resnet50" else
             torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                 torch.nn.Linear(8, len(data.classes))))
    model = model.to(device, memory_format=fmt)
    images, labels = next(iter(loader))
    images = images.to(device, non_blocking=True).float().contiguous(memory_format=fmt)
    labels = labels.to(device, non_blocking=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    first_batch_at = time.time()
    from fastpipe.machine import process_started_at

    started = process_started_at()
    print(json.dumps({"first_batch_s": first_batch_at - started, "imports_s": imported_at - started,
                      "images": len(data), "workers": h.workers}), flush=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["hand"]:
        hand(argv[1:])
        return 0
    a = parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    for number in (("1", "2") if a.phase == "all" else (a.phase,)):
        run_phase(a, number)
    return 0


if __name__ == "__main__":
    sys.exit(main())
