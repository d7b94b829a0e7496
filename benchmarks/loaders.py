"""Loader benchmark: data=default, mmap and dali feeding the same model from the same JPEG folder.

Generates the dataset once (default: the shapes generator's 4,096 JPEGs of 500x375, cached in
$FASTPIPE_CACHE), then runs one short `python -m fastpipe data=<loader> ...` per loader as its own
subprocess through runner.py (resnet50, 224 px with random-resized-crop + flip, bf16 autocast,
channels_last, batch 256, at most --steps steps), each into OUT/<loader>/, and reads every
metrics.json into a table: loader, img/s, data-wait %, warm-up s, status. A loader that fails (DALI
missing, a crash, a timeout) or that --deadline leaves no time for is a row that says why; the
others still run. Writes, as each run ends, OUT/loaders.md (the table), OUT/loaders.jsonl (one line
per run, appended) and OUT/loaders.log (commands and output).

    python benchmarks/loaders.py --out /tmp/loaders                        # on a GPU machine
    python benchmarks/loaders.py --out /tmp/l compile=default dali:data.num_threads=12
    python benchmarks/loaders.py --out /tmp/l --smoke                      # CPU, tiny, for the tests

Trailing arguments are Hydra overrides for every run; `LOADER:key=value` applies to one loader only.
A call with --loaders replaces those loaders' rows in the table and keeps the others' (their latest
lines in loaders.jsonl: split a long benchmark over several commands).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lib.runner import (Deadline, add_common_args, append_jsonl, read_jsonl, run_fastpipe, skipped, status_text,
                    write_markdown_table)

REPO = Path(__file__).resolve().parents[1]
LOADERS = ("default", "mmap", "dali")

# A short ImageNet-style measurement: train split shuffled and augmented, a small held-out split.
GPU_RUN = ["model=resnet50", "dataset=shapes", "dataset.source_size=[500,375]", "dataset.num_images=4096",
           "dataset.image_size=224", "dataset.augment=true", "dataset.val_fraction=0.05", "precision=amp",
           "precision.dtype=bf16", "runtime.channels_last=true", "train.batch_size=256", "train.epochs=100",
           "measure.warmup_steps=20", "measure.window=10", "runtime.progress=false"]
SMOKE_RUN = ["device=cpu", "model=tiny_cnn", "dataset=shapes", "dataset.source_size=[48,36]", "dataset.num_images=240",
             "dataset.image_size=32", "dataset.augment=true", "precision=fp32", "train.batch_size=16",
             "train.epochs=1", "measure.warmup_steps=2", "measure.window=3", "runtime.progress=false",
             "launcher.fresh_process=false"]
SMOKE_LOADER = {"default": ["data.num_workers=0"], "mmap": ["data.num_threads=1", "data.pack_threads=1"],
                "dali": ["data.num_threads=1"]}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="output folder (runs, table, log)")
    p.add_argument("--loaders", default=",".join(LOADERS), help="comma-separated subset of default,mmap,dali")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default 200; smoke 10)")
    p.add_argument("--smoke", action="store_true", help="CPU, tiny model, 32 px, a few steps: checks the script")
    add_common_args(p, timeout_s=480)
    p.add_argument("overrides", nargs="*", help="Hydra overrides for every run; LOADER:key=value for one loader")
    a = p.parse_args(argv)
    a.steps = a.steps or (10 if a.smoke else 200)
    a.loaders = [name for name in a.loaders.split(",") if name]
    unknown = set(a.loaders) - set(LOADERS)
    if unknown:
        p.error(f"unknown loader(s) {sorted(unknown)}; choose from {', '.join(LOADERS)}")
    return a


def overrides_for(loader: str, a) -> list:
    """The full override list of one run: base settings, smoke knobs, then the user's."""
    base = (SMOKE_RUN + SMOKE_LOADER[loader]) if a.smoke else list(GPU_RUN)
    mine = []
    for item in a.overrides:
        scope, sep, rest = item.partition(":")
        if sep and scope in LOADERS and "=" not in scope:
            if scope == loader:
                mine.append(rest)
        else:
            mine.append(item)
    return [f"data={loader}"] + base + [f"train.max_steps={a.steps}"] + mine


def generate_dataset(overrides: list, log) -> str:
    """Build (if absent) the dataset the runs will read, so no run's clock includes generating it."""
    sys.path.insert(0, str(REPO))
    from hydra import compose, initialize_config_dir

    import torch

    from fastpipe.config import register_configs, to_settings
    from fastpipe.data.splits import build_dataset
    from fastpipe.runtime import Dist, Runtime, cache_root, cpu_cores

    start = time.perf_counter()
    try:
        register_configs()
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[o for o in overrides if o.startswith("dataset")])
        runtime = Runtime(torch.device("cpu"), Dist(), cache_root(), cpu_cores())
        splits = build_dataset(to_settings(cfg, check=False).dataset, runtime, "dataset", sys.stderr.isatty())
        line = f"dataset: {splits.describe()}  ({time.perf_counter() - start:.1f} s to generate or find)"
    except Exception as exc:  # each run then meets (and reports) the same problem itself
        line = f"dataset: not prepared ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    log.write(line + "\n")
    print(line, flush=True)
    return line


def run_one(loader: str, a, log, deadline: Deadline) -> dict:
    """One `python -m fastpipe` run through runner.py: its metrics.json, or a row saying why not."""
    why = deadline.skip_reason(loader)
    if why:
        return skipped(why)
    metrics = run_fastpipe(overrides_for(loader, a), a.out / loader, deadline.timeout(a.timeout), log)
    deadline.record(loader, metrics.get("wall_s"))
    return metrics


def row(loader: str, m: dict) -> dict:
    """The numbers a table row shows (and the jsonl keeps)."""
    st = m.get("step_time_ms") or {}
    return {"loader": loader, "status": m.get("status", "failed"), "reason": m.get("reason"),
            "throughput": m.get("throughput"), "data_wait_frac": m.get("data_wait_frac"),
            "warmup_s": m.get("warmup_s"), "step_ms_median": st.get("median"), "gpu_util": m.get("gpu_util"),
            "accuracy": m.get("accuracy"), "measured_steps": m.get("measured_steps"), "env": m.get("env")}


COLUMNS = [("loader", "loader"), ("img/s", "throughput", ",.0f"),
           ("data-wait %", lambda r: None if r["data_wait_frac"] is None else 100 * r["data_wait_frac"], ".1f"),
           ("warm-up s", "warmup_s", ".1f"), ("status", status_text)]


def previous_rows(out: Path, rerun: list) -> dict:
    """The latest row of an earlier call into the same --out for each loader this call does not run (kept)."""
    return {r["loader"]: r for r in read_jsonl(out / "loaders.jsonl")
            if r.get("loader") in LOADERS and r["loader"] not in rerun}


def write_table(a, rows: dict, dataset: str) -> str:
    """loaders.md from ``rows`` (rewritten after every run: a kill keeps the rest)."""
    ordered = [rows[name] for name in LOADERS if name in rows]
    env = next((r["env"] for r in ordered if r.get("env") and r["env"].get("device")), None) or {}
    header = (f"Loaders, {'smoke (CPU, tiny_cnn, 32 px)' if a.smoke else 'resnet50 224 px bf16 channels_last batch 256'}"
              f", at most {a.steps} steps; {dataset.split('  (')[0]}; device {env.get('device_name', '?')}, "
              f"torch {env.get('torch', '?')}; overrides: {' '.join(a.overrides) or 'none'}")
    return write_markdown_table(a.out / "loaders.md", ordered, COLUMNS, header)


def main(argv=None) -> int:
    a = parse_args(argv)
    a.out = a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    rows = previous_rows(a.out, a.loaders)
    deadline = Deadline(a.deadline, floor_s=5 if a.smoke else 60)
    with open(a.out / "loaders.log", "a") as log:
        log.write(f"# benchmarks/loaders.py {' '.join(argv if argv is not None else sys.argv[1:])}\n")
        dataset = generate_dataset(overrides_for(a.loaders[0], a), log)
        for loader in a.loaders:
            print(f"running data={loader} ...", flush=True)
            rows[loader] = row(loader, run_one(loader, a, log, deadline))
            append_jsonl(a.out / "loaders.jsonl", rows[loader])
            text = write_table(a, rows, dataset)
    print(text, flush=True)
    return 0 if all(rows[name]["status"] == "ok" for name in a.loaders) else 1


if __name__ == "__main__":
    sys.exit(main())
