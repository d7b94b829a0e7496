"""Pack formats on one GPU: raw against JPEG packs, what they cost to build and store, and what
ResNet-50 trains at through each (issue 24's table), in one call with a wall-clock budget.

Steps, each a fresh process through runner.py, each a row written the moment it ends:
1. the dataset: the shapes generator's JPEG folder (default 51,200 images of 500x375), timed;
2. ``python -m fastpipe.pack`` of it at data=mmap's stored size (256x256 for image_size 224 with
   augmentation), raw and ``--codec jpeg``: bytes per image and images per second (the command's
   own "packed in S s": from the dataset built to the pack synced and renamed, imports left out);
3. the loader alone (benchmarks/lib/pack_read.py, no model): the raw pack after evicting it from the
   page cache (epoch 1 from disk, epoch 2 from memory), the JPEG pack decoded by each of
   data.decoder's choices (gpu, cpu): images per second per epoch, what one GPU can be fed;
4. ResNet-50 bf16 channels_last compile=default batch 256 (SGD, lr 0.1), 3 epochs, through the raw
   pack, the JPEG pack with each data.decoder of --decoders (gpu, cpu, dali): steady img/s, data-wait,
   warm-up, each epoch's seconds and held-out accuracy (the raw run goes first: the JPEG runs reuse
   its compiled kernels from the Inductor cache, so their warm-up is shorter);
5. ``profile`` (not in the default --steps): the same training from the JPEG pack with each decoder,
   14 steps under profile=on (steps 8-12 traced: fastpipe's torch.profiler group), the trace
   summarized by lib/trace_summary.py into OUT/profile-jpeg-<decoder>.txt (step time, GPU busy, each
   stream's busy time: the decoder's kernels and copies beside the step's), the trace itself gzipped
   into OUT when under 5 MB (else left in --work); no img/s: the profiler slows the steps it traces.
Big files (the folder, the packs, the Inductor cache, the traces) live in --work, never under --out. Read rows: img/s is the second epoch's, "epoch 1 img/s" the first's (from the disk after the
eviction); train rows: img/s is the steady state, "epoch 1 s" includes compiling. Writes
OUT/data_formats.jsonl (a line per step), OUT/data_formats.md (the table, rewritten after each
step), OUT/data_formats.log (every command and its output), OUT/env.txt and OUT/runs/<step>/ (each
run's metrics.json and graph.txt); prints the table last. data.decoder=dali needs NVIDIA DALI (the
dali extra). Measured on the H200 (51,200 images, docs/performance.md): generate ~80 s, each pack
~20 s, each train row 1.5-2 min.

    python benchmarks/data_formats.py --out $OUT --deadline 480        # on the H200
    python benchmarks/data_formats.py --out $OUT --steps train,profile --codecs raw,jpeg --decoders gpu,dali
    python benchmarks/data_formats.py --out /tmp/df --smoke             # CPU, tiny: checks the script
"""
from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from lib.runner import (Deadline, add_common_args, append_jsonl, run_command, run_fastpipe, run_json, skipped,
                    status_text, write_markdown_table)

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
# The profile step: profile=on's default schedule traces steps 8-12; 14 steps, measured from step 5.
PROFILE = ["profile=on", "train.max_steps=14", "measure.warmup_steps=5", "measure.window=3"]
TRACE_KEPT_BYTES = 5_000_000  # a gzipped trace larger than this stays in --work


def settings(a) -> dict:
    """The dataset's keys (after dataset=shapes, or SRC=shapes for the pack command), the model and
    training overrides of every step (GPU or --smoke)."""
    if a.smoke:
        data = ["dataset.source_size=[96,72]", f"dataset.num_images={a.images or 320}",
                "dataset.image_size=32", "dataset.augment=true"]
        train = ["device=cpu", "model=tiny_cnn", "compile=off", "train.batch_size=16", "train.epochs=1",
                 "measure.warmup_steps=2", "measure.window=3", "launcher.fresh_process=false", "runtime.progress=false"]
        return {"data": data, "train": train, "read": ["device=cpu", "train.batch_size=16"], "decoders": ["cpu"],
                "profile": PROFILE}
    data = ["dataset.source_size=[500,375]", f"dataset.num_images={a.images or 51200}",
            "dataset.image_size=224", "dataset.augment=true"]
    train = ["model=resnet50", "+model.zero_init_residual=true", "precision=amp", "precision.dtype=bf16",
             "runtime.channels_last=true", "compile=default", "optimizer=sgd", "optimizer.lr=0.1",
             "lr_schedule.warmup_steps=10", "train.batch_size=256", "train.epochs=3", "measure.warmup_steps=20",
             "measure.window=10", "runtime.progress=false"]
    return {"data": data, "train": train, "read": ["train.batch_size=256"], "decoders": ["gpu", "cpu"],
            "profile": PROFILE}


def environment(a, log) -> str:
    lines = []
    for cmd in (["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                [PY, "-c", "import sys; from importlib.metadata import version as v; print('python', sys.version.split()[0], "
                           "'torch', v('torch'), 'torchvision', v('torchvision'), '(smoke: no torch import)')"] if a.smoke else
                [PY, "-c", "import torch, torchvision, sys; print('python', sys.version.split()[0], 'torch', "
                           "torch.__version__, 'torchvision', torchvision.__version__, 'cuda', torch.version.cuda)"]):
        try:
            lines.append(subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip())
        except (OSError, subprocess.TimeoutExpired) as exc:
            lines.append(f"{cmd[0]}: {exc}")
    disk = shutil.disk_usage(a.work)
    lines.append(f"cpu cores {os.cpu_count()}, RAM {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, "
                 f"disk free under {a.work}: {disk.free / 2**30:.0f} GiB, date {time.strftime('%Y-%m-%d %H:%M')}")
    text = "\n".join(lines) + "\n"
    (a.out / "env.txt").write_text(text)
    log.write(text)
    return text


def generate(a, s, log, deadline) -> dict:
    """fastpipe's own generator, through the composition the pack command uses (so the same folder)."""
    cmd = [PY, "-c", "import sys, time; from fastpipe.cli.pack import resolve_source; t = time.perf_counter(); "
           "s = resolve_source('shapes', sys.argv[1:], False); "
           "print('{\"images\": %d, \"gen_s\": %.2f}' % (len(s.train) + len(s.val), time.perf_counter() - t))",
           *s["data"]]
    row = run_json(cmd, deadline.timeout(max(a.timeout, 300)), log)  # 51,200 images: about a minute on 16 cores
    if row.get("status") == "ok":
        row["img_per_s"] = row["images"] / max(row["gen_s"], 1e-6)
    return dict(row, step="generate the JPEG folder")


def pack(a, s, codec: str, log, deadline) -> dict:
    out = a.work / f"pack-{codec}.fppack"
    out.unlink(missing_ok=True)
    cmd = [PY, "-m", "fastpipe.pack", "shapes", str(out), *s["data"], "--codec", codec, "--no-progress",
           "--threads", str(os.cpu_count() or 1)]
    done = run_command(cmd, deadline.timeout(a.timeout), log)
    row = {"step": f"pack {codec}", "status": "ok" if done.code == 0 and out.exists() else "failed",
           "wall_s": done.wall_s, "pack": str(out)}
    if row["status"] == "ok":  # "wrote PATH: N images ... packed in S s (R images/s)"
        line = next(line for line in done.stdout if line.startswith("wrote"))
        row["pack_bytes"] = out.stat().st_size
        row["images"] = int(line.split(": ")[1].split()[0])
        row["bytes_per_image"] = row["pack_bytes"] / row["images"]
        row["pack_s"] = float(line.rsplit("packed in ", 1)[1].split()[0])
        row["img_per_s"] = row["images"] / row["pack_s"]
    else:
        row["reason"] = (done.stderr or ["no output"])[-1]
    return row


def read(a, s, codec: str, decoder: str, cold: bool, log, deadline) -> dict:
    cmd = [PY, str(REPO / "benchmarks" / "lib" / "pack_read.py"), "--pack", str(a.work / f"pack-{codec}.fppack"),
           "--epochs", "2", *(["--cold"] if cold else []), "--", "dataset=shapes", *s["data"], *s["read"], f"data.decoder={decoder}"]
    row = run_json(cmd, deadline.timeout(a.timeout), log)
    rates = row.get("img_per_s") or [None, None]
    name = f"read {codec}" + (f" ({decoder} decode)" if codec == "jpeg" else "") + (", evicted first" if cold else "")
    return dict(row, step=name, first_img_per_s=rates[0], img_per_s=rates[-1])


def training(a, s, codec: str, decoder: str) -> list:
    """The overrides of a training run from the ``codec`` pack with data.decoder=``decoder``."""
    return ["dataset=shapes", *s["data"], *s["train"], "data=mmap", f"data.path={a.work / f'pack-{codec}.fppack'}",
            f"data.decoder={decoder}", "data.verify=false"]  # checksums: the pack command's --verify


def train(a, s, codec: str, decoder: str, log, deadline) -> dict:
    name = f"train {codec}" + (f" ({decoder} decode)" if codec == "jpeg" else "")
    run_dir = a.out / "runs" / name.replace(" (", "-").replace(" ", "-").replace(")", "")
    m = run_fastpipe(training(a, s, codec, decoder), run_dir, deadline.timeout(a.timeout), log,
                     env={"TORCHINDUCTOR_CACHE_DIR": str(a.work / "inductor")})
    epochs = m.get("epoch_times_s") or []
    return {"step": name, "status": m.get("status", "failed"), "reason": m.get("reason"), "wall_s": m.get("wall_s"),
            "img_per_s": m.get("throughput"), "data_wait_frac": m.get("data_wait_frac"), "warmup_s": m.get("warmup_s"),
            "epoch_times_s": epochs, "epoch1_s": epochs[0] if epochs else None, "last_epoch_s": epochs[-1] if epochs else None,
            "accuracy": (m.get("val_metrics") or {}).get("accuracy"), "graph": m.get("run_dir")}


def profile(a, s, decoder: str, log, deadline) -> dict:
    """A few steps from the JPEG pack under profile=on; the trace summarized into OUT (its run stays in --work)."""
    name, run_dir = f"profile-jpeg-{decoder}", a.work / "profile" / decoder
    m = run_fastpipe([*training(a, s, "jpeg", decoder), *s["profile"]], run_dir, deadline.timeout(a.timeout), log,
                     env={"TORCHINDUCTOR_CACHE_DIR": str(a.work / "inductor")})
    row = {"step": f"profile jpeg ({decoder} decode)", "status": m.get("status", "failed"), "reason": m.get("reason"),
           "wall_s": m.get("wall_s")}
    traces = sorted((run_dir / "profile").glob("*.pt.trace.json*"))
    if row["status"] == "ok" and not traces:
        row.update(status="failed", reason=f"no trace in {run_dir / 'profile'}")
    if row["status"] == "ok":
        row.update(summarize_trace(traces[-1], run_dir, a.out, name))
    return row


def summarize_trace(trace: Path, run_dir: Path, out: Path, name: str) -> dict:
    """OUT/NAME.txt: the run's loader line and lib/trace_summary.py's summary; the gzipped trace beside it
    when it is small enough to keep with the results."""
    from lib.trace_summary import load_events, summarize

    loader = [line.strip() for line in (run_dir / "graph.txt").read_text().splitlines() if "loader" in line]
    (out / f"{name}.txt").write_text(f"trace {trace}\n{loader[0] if loader else ''}\n\n"
                                     f"{summarize(load_events(trace))}\n")
    packed = trace if trace.suffix == ".gz" else trace.with_name(trace.name + ".gz")
    if packed != trace:
        with open(trace, "rb") as src, gzip.open(packed, "wb") as dst:
            shutil.copyfileobj(src, dst)
    kept = packed.stat().st_size < TRACE_KEPT_BYTES
    if kept:
        shutil.copy(packed, out / f"{name}.pt.trace.json.gz")
    return {"summary": str(out / f"{name}.txt"), "trace": str(out / f"{name}.pt.trace.json.gz" if kept else packed),
            "trace_gz_bytes": packed.stat().st_size}


COLUMNS = [("step", "step"), ("img/s", "img_per_s", ",.0f"), ("bytes/image", "bytes_per_image", ",.0f"),
           ("pack GB", lambda r: r.get("pack_bytes") and r["pack_bytes"] / 1e9, ".2f"),
           ("data-wait %", lambda r: None if r.get("data_wait_frac") is None else 100 * r["data_wait_frac"], ".1f"),
           ("warm-up s", "warmup_s", ".1f"), ("epoch 1 s", "epoch1_s", ".1f"), ("last epoch s", "last_epoch_s", ".1f"),
           ("read: epoch 1 img/s", "first_img_per_s", ",.0f"),
           ("held-out acc", "accuracy", ".3f"), ("wall s", "wall_s", ".0f"), ("status", status_text)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="results folder (small files only)")
    p.add_argument("--work", type=Path, default=None, help="dataset, packs, caches (default /tmp/fp-data, smoke /tmp/fp-data-smoke)")
    p.add_argument("--images", type=int, default=None, help="images generated (default 51,200; smoke 320)")
    p.add_argument("--smoke", action="store_true", help="CPU, tiny_cnn, 320 small images: checks the script")
    p.add_argument("--steps", default="generate,pack,train,read",
                   help="the kinds of step to run, comma-separated (a later call on the same --work reuses its "
                        "folder and packs): generate, pack, train, read, profile")
    p.add_argument("--codecs", default="raw,jpeg", help="the packs the train and read rows use, comma-separated")
    p.add_argument("--decoders", default=None, help="the JPEG pack's data.decoder choices (gpu, cpu, dali) the train, "
                                                    "read and profile rows use, comma-separated (default: gpu,cpu; "
                                                    "smoke: cpu)")
    add_common_args(p, timeout_s=200)
    a = p.parse_args(argv)
    kinds, codecs = set(a.steps.split(",")), set(a.codecs.split(","))
    a.work = (a.work or Path("/tmp/fp-data-smoke" if a.smoke else "/tmp/fp-data")).resolve()
    a.out = a.out.resolve()
    a.work.mkdir(parents=True, exist_ok=True)
    a.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("FASTPIPE_CACHE", str(a.work / "cache"))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    s, deadline, rows = settings(a), Deadline(a.deadline, floor_s=5 if a.smoke else 60), []
    decoders = a.decoders.split(",") if a.decoders else s["decoders"]
    raw, jpeg = "raw" in codecs, "jpeg" in codecs
    steps = [("generate", lambda log: generate(a, s, log, deadline)),
             ("pack", lambda log: pack(a, s, "raw", log, deadline)),
             ("pack", lambda log: pack(a, s, "jpeg", log, deadline)),
             *[("train", lambda log: train(a, s, "raw", "auto", log, deadline))] * raw,
             *[("train", (lambda d: lambda log: train(a, s, "jpeg", d, log, deadline))(d)) for d in decoders if jpeg],
             *[("read", lambda log: read(a, s, "raw", "auto", True, log, deadline))] * raw,
             *[("read", (lambda d: lambda log: read(a, s, "jpeg", d, False, log, deadline))(d)) for d in decoders if jpeg],
             *[("profile", (lambda d: lambda log: profile(a, s, d, log, deadline))(d)) for d in decoders]]
    steps = [(kind, step) for kind, step in steps if kind in kinds]
    with open(a.out / "data_formats.log", "a") as log:
        log.write(f"# benchmarks/data_formats.py {' '.join(argv if argv is not None else sys.argv[1:])}\n")
        env = environment(a, log)
        for kind, step in steps:
            why = deadline.skip_reason(kind)
            start = time.perf_counter()
            row = skipped(why, step=kind) if why else step(log)
            deadline.record(kind, time.perf_counter() - start)
            rows.append(row)
            append_jsonl(a.out / "data_formats.jsonl", row)
            text = write_markdown_table(a.out / "data_formats.md", rows, COLUMNS,
                                        title=f"Pack formats ({'smoke' if a.smoke else 'ResNet-50 bf16 compile=default b256'}); "
                                              + env.strip().replace("\n", "; "))
            print(f"[{time.strftime('%H:%M:%S')}] {row['step']}: {status_text(row)}, {deadline.left():.0f} s left",
                  flush=True)
    print(text, flush=True)
    return 0 if all(r.get("status") == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
