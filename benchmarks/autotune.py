"""hydra/sweeper=autotune against the exhaustive grid over the same candidates (issue 56's measured goal).

Per case, in --out/CASE/:
1. grid: every combination of the case's candidates, one run each (the basic sweeper), then its two
   fastest confirmed with 3 repeats each (report.repeats=3): the grid's best is the faster median of those.
2. autotune: `-m hydra/sweeper=autotune` from the case's baseline, its space the grid's values
   (hydra.sweeper.space) and every other key of the bound table fixed, so both search the same set.
3. The verdicts: autotune's final configuration against the grid's best (goal: within 5 % by throughput,
   or not separable: their repeats overlap) and autotune's wall time against the grid's (goal: at most
   35 %, the grid's confirmation included).

Writes --out/autotune.md (a row per case), autotune.jsonl, autotune.log and each sweep's folder (report.md,
autotune.json). A sweep already finished in --out is read back, not rerun.

    OMP_NUM_THREADS=1 python benchmarks/autotune.py --out /tmp/autotune --cases cpu       # 2-core CPU, < 15 min a grid
    python benchmarks/autotune.py --out $OUT/at --cases resnet50,gpt --deadline 560       # one GPU, calls chained
    python benchmarks/autotune.py --out /tmp/autotune --cases cpu --smoke                 # checks the script
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastpipe.measure.noise import parity  # noqa: E402  (the report's parity rule)
from lib.runner import (add_common_args, append_jsonl, chosen_cases, Deadline, header, read_json, run_fastpipe,
                        write_markdown_table)

TABLE_KEYS = ("data", "compile", "precision", "train.batch_size", "data.num_workers", "data.decode_workers",
              "runtime.channels_last")  # fastpipe/sweeps/autotune/candidates.py's: fixed unless the case's grid has them
SHORT_GPU = ["train.max_steps=200", "measure.warmup_steps=30", "measure.window=20", "train.eval_every=0",
             "runtime.progress=false", "logger=none"]
# name: (the baseline's overrides, the grid: key -> values, the baseline's value first)
CASES = {
    "cpu": (["train.max_steps=120", "measure.warmup_steps=20", "measure.window=10", "runtime.progress=false",
             "logger=none"], {"data": ["default", "mmap"], "compile": ["off", "default"],
                              "runtime.channels_last": ["false", "true"]}),  # amp: bf16 emulated, 10x slower on this VM
    "friedman": (["--config-dir", "examples/friedman/conf", "+experiment=regression", "train.max_steps=400",
                  "measure.warmup_steps=50", "measure.window=50", "runtime.progress=false", "logger=none"],
                 {"compile": ["off", "default"], "train.batch_size": ["128", "auto"]}),
    "resnet50": (["dataset=shapes", "dataset.num_images=51200", "dataset.image_size=224", "model=resnet50",
                  "optimizer=sgd", "train.batch_size=256", *SHORT_GPU],
                 {"data": ["default", "mmap"], "precision": ["fp32", "amp"], "compile": ["off", "default"],
                  "train.batch_size": ["256", "auto"]}),
    "gpt": (["task=lm", "dataset=tokens", "dataset.seq_len=1024", "model=gpt", "optimizer=adamw", "train.batch_size=16",
             *SHORT_GPU], {"precision": ["amp", "fp8"], "compile": ["off", "default"], "train.batch_size": ["16", "32"]}),
}
SMOKE = ["dataset.num_images=240", "dataset.image_size=16", "train.batch_size=16", "train.max_steps=12",
         "measure.warmup_steps=2", "measure.window=3", "data.num_workers=0"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cases", default="cpu", help=f"comma-separated, of {', '.join(CASES)}")
    p.add_argument("--smoke", action="store_true", help="the cpu case's grid on tiny runs: checks the script")
    add_common_args(p, timeout_s=3600)
    a = p.parse_args(argv)
    a.cases = chosen_cases(p, a.cases, CASES)
    return a


def sweep(a, log, deadline: Deadline, name: str, overrides: list, env: dict) -> dict:
    """One `-m` sweep into --out/NAME (read back when its report exists): its row, with its jobs' metrics."""
    folder = a.out / name
    if (folder / "report.md").exists():
        return {"status": "ok", "wall_s": (read_json(folder / "wall.json") or {}).get("wall_s"), "folder": folder}
    reason = deadline.skip_reason("sweep")
    if reason:
        return {"status": "skipped", "reason": reason, "folder": folder}
    row = run_fastpipe(overrides, folder, deadline.timeout(a.timeout), log, env=env, multirun=True)
    deadline.record("sweep", row.get("wall_s"))
    (folder / "wall.json").write_text(json.dumps({"wall_s": row.get("wall_s")}))
    return dict(row, folder=folder)


def jobs(folder: Path) -> list:
    """(overrides, metrics) of each numbered job folder."""
    found = []
    for job in sorted((p for p in folder.glob("[0-9]*") if p.is_dir()), key=lambda p: int(p.name)):
        m = read_json(job / "metrics.json") or {}
        found.append((m.get("overrides") or [], m))
    return found


def runs(m: dict) -> list:
    listed = [t for t in ((m.get("repeats") or {}).get("throughput") or []) if t is not None]
    return listed or ([m["throughput"]] if m.get("throughput") else [])


def measure(a, log, deadline: Deadline, name: str) -> dict:
    base, grid = CASES[name]
    base = [*base, *(SMOKE if a.smoke else [])]
    env = {"PYTHONPATH": os.pathsep.join(["examples/friedman", os.environ.get("PYTHONPATH", "")])} \
        if name == "friedman" else {}
    lists = [f"{k}={','.join(v)}" for k, v in grid.items()]
    every = sweep(a, log, deadline, f"{name}-grid", [*base, *lists], env)
    done = jobs(every["folder"])
    base_metric = ((done[0][1] if done else {}).get("primary_metric") or {})
    held = [j for j in done if j[1].get("status") == "ok" and parity(
        (j[1].get("primary_metric") or {}).get("value"), base_metric.get("value"), 0.01,
        base_metric.get("higher_is_better", True)) != "FAIL"]  # the report's rule: report.parity_tol's default
    ranked = sorted(held, key=lambda j: -(j[1].get("throughput") or 0))[:2]
    top = [[o for o in overrides if o.split("=", 1)[0].lstrip("+") in grid] for overrides, _ in ranked]
    confirms = [sweep(a, log, deadline, f"{name}-confirm{i}", [*base, *pick, "report.repeats=3"], env)
                for i, pick in enumerate(top)]
    space = "{" + ", ".join(f'{k}: "{",".join(v[1:])}"' for k, v in grid.items()) + "}"
    fixed = "[" + ",".join(k for k in TABLE_KEYS if k not in grid) + "]"
    first = [f"{k}={v[0]}" for k, v in grid.items()]
    tuned = sweep(a, log, deadline, f"{name}-autotune", [*base, *first, "hydra/sweeper=autotune",
                                                          f"hydra.sweeper.space={space}", f"hydra.sweeper.fixed={fixed}"], env)
    return verdict(name, grid, every, confirms, tuned)


def verdict(name: str, grid: dict, every: dict, confirms: list, tuned: dict) -> dict:
    confirmed = [j for c in confirms if c.get("folder") for j in jobs(c["folder"])]
    best = max(confirmed, key=lambda j: statistics.median(runs(j[1]) or [0]), default=None)
    record = read_json(tuned["folder"] / "autotune.json") if tuned.get("folder") else None
    final = None
    if record:
        trial = next(t for t in record["trials"] if t["num"] == record["final"]["trial"])
        final = read_json(tuned["folder"] / trial["folder"] / "metrics.json")
    row = {"case": name, "grid_s": (every.get("wall_s") or 0) + sum(c.get("wall_s") or 0 for c in confirms) or None,
           "autotune_s": tuned.get("wall_s"), "status": "ok" if best and final else "failed",
           "reason": None if best and final else "a sweep did not finish"}
    if best and final:
        mine, theirs = runs(final), runs(best[1])
        ratio = statistics.median(mine) / statistics.median(theirs)
        apart = min(mine) > max(theirs) or max(mine) < min(theirs)
        row.update(grid_best=_shown(best[0], grid), grid_best_tput=statistics.median(theirs),
                   final=_shown(record["final"]["overrides"], grid) or "as given", final_tput=statistics.median(mine),
                   ratio=ratio, separable="yes" if apart else "no",
                   cost=row["autotune_s"] / row["grid_s"] if row["autotune_s"] and row["grid_s"] else None)
        row["goal"] = ("met" if (ratio >= 0.95 or not apart) and (row["cost"] or 1) <= 0.35 else "missed")
    return row


def _shown(overrides: list, grid: dict) -> str:
    """The overrides of the grid's keys: what tells one configuration of the case from another."""
    return " ".join(o for o in overrides if o.split("=", 1)[0].lstrip("+") in grid)


def main(argv=None) -> int:
    a = parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    deadline, rows = Deadline(a.deadline, floor_s=120.0), []
    title = header(a.smoke)
    columns = [("case", "case"), ("grid's best", "grid_best"), ("samples/s", "grid_best_tput", ".1f"),
               ("autotune's final", "final"), ("samples/s ", "final_tput", ".1f"), ("ratio", "ratio", ".3f"),
               ("separable", "separable"), ("grid wall (s)", "grid_s", ".0f"), ("autotune wall (s)", "autotune_s", ".0f"),
               ("cost", "cost", ".2f"), ("goal", "goal"), ("status", "status")]
    with open(a.out / "autotune.log", "a") as log:
        for name in a.cases:
            rows.append(measure(a, log, deadline, name))
            append_jsonl(a.out / "autotune.jsonl", rows[-1])
            write_markdown_table(a.out / "autotune.md", rows, columns, title=title,
                                 notes=["- goal: the final within 5 % of the grid's best by throughput, or not separable "
                                        "from it (their repeats overlap), at most 35 % of the grid's wall time"])
    print((a.out / "autotune.md").read_text(), flush=True)
    return 0 if rows and all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
