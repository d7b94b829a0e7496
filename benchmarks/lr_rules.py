"""Which optimizer.lr=auto rule to make the default: each candidate's time to target against the best of a
5-point log grid around the recipe's conventional rate, case by case (issue 55's measurement).

Per case, in --out/CASE/:
1. ramp: the range test alone at its defaults but train.lr_find_diverge_ratio=inf (every step of the ramp
   recorded: ramp.csv), then replayed here through fastpipe's own Curve at the default divergence settings
   for valley, steepest, min_div10 and diverged_div10 (a curve with no descent: "refused");
   decade: the same at train.lr_find_steps_per_decade=--per-decade, read by valley (decade.csv);
   trial: the range test alone with train.lr_find_rule=trial (its suggestion and its cost).
2. grid: the conventional rate x 0.1, 0.3, 1, 3, 10, one run each (seed 0).
3. rules: one run at each distinct rate the candidates read (a given rate trains exactly as optimizer.lr=auto
   at that suggestion: tests/integration/test_lr_range.py), seed 0.
4. seeds: the grid's best rate and each candidate within 1.5x of it on seeds 1 and 2 (--seeds 3), where
   the deadline allows.
Time to target is the training clock's (the range test is set-up: its seconds are a column of their own,
and a share of the grid's best time). A run that missed the target fails its case. A run whose folder holds
an ok metrics.json is not run again, so a call cut off by its deadline goes on in the next.

Writes --out/lr_rules.md (a table per case, the verdicts), lr_rules.jsonl (one row per run), lr_rules.log.

    python benchmarks/lr_rules.py --out /tmp/lr_rules --cases tiny_cnn,friedman,byte_lm    # the 2-core CPU
    python benchmarks/lr_rules.py --out /tmp/lr_rules --cases resnet50,gpt,convnext --deadline 560   # one GPU
    python benchmarks/lr_rules.py --out /tmp/lr_rules --cases tiny_cnn --smoke             # checks the script
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from pathlib import Path

from lib.runner import (add_common_args, append_jsonl, chosen_cases, Deadline, header, read_json, REPO,
                        run_fastpipe, write_markdown_table)

sys.path.insert(0, str(REPO))
from fastpipe.finders import lr_curve  # noqa: E402  (the rules as fastpipe applies them)

SHAPES_224 = ["dataset=shapes", "dataset.source_size=[500,375]", "dataset.num_images=51200", "dataset.image_size=224",
              "dataset.augment=true", "precision=amp", "data=mmap", "train.epochs=3", "train.target=0.90",
              "train.eval_every=25", "train.target_eval_samples=2048", "train.batch_size=256"]
TO_TARGET = ["report.objective=time_to_target", "measure.warmup_steps=10", "measure.window=10"]
# name: (overrides, the recipe's conventional rate, extra environment)
CASES = {
    "resnet50": ([*SHAPES_224, "model=resnet50", "+model.zero_init_residual=true", "optimizer=sgd",
                  "lr_schedule.warmup_steps=10"], 0.1, {}),
    "convnext": ([*SHAPES_224, "model=resnet50", "model._target_=torchvision.models.convnext_tiny",
                  "optimizer=adamw", "optimizer.weight_decay=0.05", "lr_schedule.warmup_steps=25"], 1e-3, {}),
    "gpt": (["task=lm", "dataset=tokens", "dataset.seq_len=256", "model=gpt", "precision=amp", "optimizer=adamw",
             "train.batch_size=64", "train.target=1.6", "train.eval_every=100", "train.target_eval_samples=1024",
             "train.epochs=20", "train.max_steps=3000", "lr_schedule.warmup_steps=100"], 6e-4, {}),
    "tiny_cnn": (["train.target=0.95", "train.eval_every=10", "train.epochs=6"], 3e-3, {}),
    "byte_lm": (["task=lm", "dataset=tokens", "model=gpt_tiny", "train.target=2.0", "train.eval_every=100",
                 "train.target_eval_samples=1024", "train.epochs=10", "train.max_steps=1500", "train.batch_size=32"],
                3e-3, {}),
    "friedman": (["--config-dir", "examples/friedman/conf", "+experiment=regression", "train.target=1.5",
                  "train.eval_every=50", "train.epochs=40"], 1e-2,
                 {"PYTHONPATH": os.pathsep.join([str(REPO / "examples" / "friedman"), os.environ.get("PYTHONPATH", "")])}),
}
SMOKE = ["dataset.num_images=240", "dataset.image_size=16", "train.batch_size=16", "train.max_steps=30",
         "train.target=0.2", "train.eval_every=5", "measure.warmup_steps=2", "measure.window=3", "data.num_workers=0",
         "train.lr_find_steps=20", "train.lr_find_min=1e-4", "train.lr_find_max=10"]
GRID = (0.1, 0.3, 1.0, 3.0, 10.0)
RULES = ("valley", "steepest", "min_div10", "diverged_div10")
GOAL = 1.5


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cases", default="tiny_cnn,friedman,byte_lm", help=f"comma-separated, of {', '.join(CASES)}")
    p.add_argument("--per-decade", type=int, default=25, help="train.lr_find_steps_per_decade of the decade ramp")
    p.add_argument("--trial-steps", type=int, default=50, help="train.lr_find_trial_steps of the trial rule")
    p.add_argument("--seeds", type=int, default=3, help="seeds of the grid's best and the candidates near it")
    p.add_argument("--smoke", action="store_true", help="tiny runs of tiny_cnn: checks the script, not the rules")
    add_common_args(p, timeout_s=1800)
    a = p.parse_args(argv)
    a.cases = chosen_cases(p, a.cases, CASES)
    return a


class Case:
    """One case's runs: each a fresh ``python -m fastpipe`` into --out/CASE/NAME, skipped when already ok."""

    def __init__(self, a, name: str, log, deadline: Deadline) -> None:
        overrides, self.conventional, self.env = CASES[name]
        self.a, self.name, self.log, self.deadline = a, name, log, deadline
        self.overrides = [*overrides, *TO_TARGET, "runtime.progress=false", "logger=none"] + (SMOKE if a.smoke else [])
        self.folder = a.out / name

    def run(self, label: str, extra: list) -> dict:
        run_dir = self.folder / label
        done = read_json(run_dir / "metrics.json")
        if done and done.get("status") == "ok":
            return done
        reason = self.deadline.skip_reason(self.name)
        if reason:
            return {"status": "skipped", "reason": reason}
        row = run_fastpipe([*self.overrides, *extra], run_dir, self.deadline.timeout(self.a.timeout), self.log,
                           env=self.env)
        self.deadline.record(self.name, row.get("wall_s"))
        return row

    def curve(self, label: str, extra: list):
        """A range test alone, every step kept: (its record, its raw (lr, loss) points)."""
        m = self.run(label, ["optimizer.lr=auto", "train.lr_find_only=true", "train.lr_find_diverge_ratio=inf",
                             "train.lr_find_seed=0", *extra])
        path = self.folder / label / lr_curve.CSV
        if m.get("status") != "ok" or not path.exists():
            return m, []
        with open(path) as fh:
            points = [(float(r["lr"]), float(r["loss"])) for r in csv.DictReader(fh)]
        (self.a.out / f"{self.name}-{label}.csv").write_text(path.read_text())  # beside the tables, to commit
        return m, points


def read(points, steps: int) -> dict:
    """Each rule's rate on ``points`` replayed at the default divergence settings; "refused" without descent."""
    curve = lr_curve.Curve()
    for lr, loss in points:
        if curve.add(lr, loss):
            break
    if not points or curve.readable(steps) is None or not curve.descended():
        return {rule: "refused" for rule in RULES}
    return {rule: lr_curve.suggest(rule, curve, steps) for rule in RULES}


def seconds(m: dict):
    target = m.get("target") or {}
    return target.get("seconds") if m.get("status") == "ok" and target.get("reached") else None


def measure(case: Case) -> list:
    """The case's rows: the candidates' rates, the grid, the runs, the seeds (module docstring)."""
    steps = 20 if case.a.smoke else 100
    ramp, points = case.curve("ramp", [])
    decade, decade_points = case.curve("decade", [f"train.lr_find_steps_per_decade={case.a.per_decade}"])
    trial = case.run("trial", ["optimizer.lr=auto", "train.lr_find_only=true", "train.lr_find_rule=trial",
                               "train.lr_find_seed=0", f"train.lr_find_trial_steps={case.a.trial_steps}"])
    rates = read(points, steps)
    rates["decade_valley"] = read(decade_points, (decade.get("lr_search") or {}).get("steps", steps))["valley"]
    rates["trial"] = (trial.get("lr_search") or {}).get("suggestion") or "refused"
    cost = {"ramp": (ramp.get("lr_search") or {}).get("seconds"), "decade": (decade.get("lr_search") or {}).get(
        "seconds"), "trial": (trial.get("lr_search") or {}).get("seconds")}
    rows = []
    for factor in GRID:
        rate = case.conventional * factor
        m = case.run(f"grid-{rate:.3g}", [f"optimizer.lr={rate!r}", "seed=0"])
        rows.append({"case": case.name, "job": f"grid x{factor:g}", "lr": rate, "seed": 0, "seconds": seconds(m),
                     "status": m.get("status"), "reason": m.get("reason")})
    for rule, rate in rates.items():
        test_s = cost["decade" if rule == "decade_valley" else "trial" if rule == "trial" else "ramp"]
        if not isinstance(rate, float):
            rows.append({"case": case.name, "job": rule, "lr": None, "seed": 0, "seconds": None, "status": "failed",
                         "reason": f"{rate or 'no rate'}: no descent (or no divergence) to read", "test_s": test_s})
            continue
        m = case.run(f"rate-{rate:.3g}", [f"optimizer.lr={rate!r}", "seed=0"])
        rows.append({"case": case.name, "job": rule, "lr": rate, "seed": 0, "seconds": seconds(m), "test_s": test_s,
                     "status": m.get("status"), "reason": m.get("reason")})
    best = _best(rows, "grid")
    for seed in range(1, case.a.seeds):
        near = [r for r in list(rows) if r["seed"] == 0 and r["seconds"] and best and (
            r is best or (not r["job"].startswith("grid") and r["seconds"] <= GOAL * best["seconds"]))]
        for r in near:
            m = case.run(f"seed{seed}-{r['lr']:.3g}", [f"optimizer.lr={r['lr']!r}", f"seed={seed}"])
            rows.append({**r, "seed": seed, "seconds": seconds(m), "status": m.get("status"),
                         "reason": m.get("reason")})
    return rows


def _best(rows: list, prefix: str):
    done = [r for r in rows if r["job"].startswith(prefix) and r["seed"] == 0 and r["seconds"]]
    return min(done, key=lambda r: r["seconds"]) if done else None


def median_s(runs: list):
    """The median time over a job's seeds, a miss slower than every reach; None when the median missed."""
    times = sorted(r["seconds"] or math.inf for r in runs)
    mid = len(times) // 2
    centre = times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2
    return None if math.isinf(centre) else centre


def verdicts(rows: list) -> list:
    """Per case: each candidate's time against the grid's best, seed 0, then over the seeds both ran."""
    lines = []
    for case in dict.fromkeys(r["case"] for r in rows):
        mine = [r for r in rows if r["case"] == case]
        best = _best(mine, "grid")
        if best is None:
            lines.append(f"- {case}: no grid rate reached the target: no comparison")
            continue
        lines.append(f"- {case}: the grid's best is lr {best['lr']:.3g}, {best['seconds']:.1f} s (seed 0)")
        grid_runs = [r for r in mine if r["job"] == best["job"]]
        for job in dict.fromkeys(r["job"] for r in mine if not r["job"].startswith("grid")):
            runs = [r for r in mine if r["job"] == job]
            first = runs[0]
            test = f"; its range test {first['test_s']:.1f} s" if first.get("test_s") else ""
            if not first["seconds"]:
                lines.append(f"- {case} {job}: fails its case ({first.get('reason') or 'target not reached'}){test}")
                continue
            line = (f"- {case} {job}: lr {first['lr']:.3g}, {first['seconds'] / best['seconds']:.2f}x the grid's best "
                    f"(goal: at most {GOAL}x){test}")
            if len(runs) > 1 and len(grid_runs) > 1:
                mine_s, grid_s = median_s(runs), median_s(grid_runs)
                line += (f"; over {len(runs)} seeds the medians {mine_s:.1f} s against {grid_s:.1f} s: "
                         f"{mine_s / grid_s:.2f}x" if mine_s and grid_s else
                         f"; over {len(runs)} seeds a median missed the target")
            lines.append(line)
    return lines


def main(argv=None) -> int:
    a = parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    deadline, rows = Deadline(a.deadline, floor_s=60.0), []
    title = header(a.smoke)
    columns = [("case", "case"), ("job", "job"), ("lr", "lr", ".3g"), ("seed", "seed"),
               ("time to target (s)", "seconds", ".1f"), ("range test (s)", "test_s", ".1f"), ("status", "status")]
    (a.out / "lr_rules.jsonl").unlink(missing_ok=True)  # this call's rows: a run done before is read back, not rerun
    with open(a.out / "lr_rules.log", "a") as log:
        for name in a.cases:
            for row in measure(Case(a, name, log, deadline)):
                rows.append(row)
                append_jsonl(a.out / "lr_rules.jsonl", row)
            write_markdown_table(a.out / "lr_rules.md", rows, columns, title=title, notes=verdicts(rows))
    print((a.out / "lr_rules.md").read_text(), flush=True)
    return 0 if rows and all(r.get("status") in ("ok", "failed") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
