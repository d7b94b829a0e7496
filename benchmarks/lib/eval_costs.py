"""What each evaluation of a time-to-target run cost, from its metrics.json curve: a screen (a subset
evaluation) is the gap between two evaluations less the steps between them at the run's median step
time; the whole split is the gap between a subset evaluation and its confirmation at the same step; the
rest is `time_breakdown_s.eval` less those (the first evaluation's one-off costs, the epoch ends' extra).

    python3 benchmarks/lib/eval_costs.py benchmarks/results/time-to-target-overhead/h200-2026-12-03-aa36b4d/p2/runs.tgz
"""
from __future__ import annotations

import json
import statistics
import sys
import tarfile


def costs(metrics: dict) -> dict:
    curve, median_ms = metrics["target"]["curve"], metrics["step_time_ms"]["median"]
    screens, whole = [], None
    for before, after in zip(curve, curve[1:]):
        gap = after["seconds"] - before["seconds"]
        if after["step"] == before["step"]:
            whole = gap
        else:
            screens.append(gap - (after["step"] - before["step"]) * median_ms / 1000)
    screen = statistics.median(screens) if screens else None
    count = sum(1 for point in curve if point.get("subset"))
    spent = metrics["time_breakdown_s"]["eval"]
    rest = spent - count * screen - (whole or 0) if screen is not None else None
    return {"batch": metrics.get("batch_size"), "screen_s": screen, "screens": count, "whole_s": whole,
            "eval_s": spent, "rest_s": rest, "train_s": metrics["time_breakdown_s"]["train"]}


def main(path: str) -> None:
    print("| run | batch | screens | a screen (s, median) | the whole split (s) | eval (s) | the rest (s) | train (s) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tarfile.open(path) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if not member.name.endswith("metrics.json"):
                continue
            metrics = json.load(tar.extractfile(member))
            if not (metrics.get("target") or {}).get("curve"):
                continue
            c = costs(metrics)
            f = lambda v: "" if v is None else f"{v:.3f}"  # noqa: E731
            print(f"| {member.name.rsplit('/', 1)[0]} | {c['batch']} | {c['screens']} | {f(c['screen_s'])} | "
                  f"{f(c['whole_s'])} | {c['eval_s']:.2f} | {f(c['rest_s'])} | {c['train_s']:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1])
