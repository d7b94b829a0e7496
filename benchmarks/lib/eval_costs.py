"""What each evaluation of a time-to-target run cost, from its metrics.json curve: a screen (a subset
evaluation) is the gap between two evaluations less the steps between them at the run's median step
time (a screen that ended early, once the target was out of its reach, says how many samples it
evaluated); the first evaluation, which has no gap before it, is counted as one whole screen; the whole
split is the gap between a subset evaluation and its confirmation at the same step; the rest is
`time_breakdown_s.eval` less those (the first evaluation's one-off costs).

    python3 benchmarks/lib/eval_costs.py benchmarks/results/time-to-target-overhead/h200-2026-12-03-aa36b4d/p2/runs.tgz
"""
from __future__ import annotations

import json
import statistics
import sys
import tarfile


def costs(metrics: dict) -> dict:
    curve, median_ms = metrics["target"]["curve"], metrics["step_time_ms"]["median"]
    screens, ended, wholes = [], [], []
    for before, after in zip(curve, curve[1:]):
        gap = after["seconds"] - before["seconds"]
        if after["step"] == before["step"]:
            wholes.append(gap)
        else:  # a screen (or an epoch end's evaluation) after the steps between them
            screens.append(gap - (after["step"] - before["step"]) * median_ms / 1000)
            ended.append(after.get("evaluated"))
    whole_screens = [c for c, e in zip(screens, ended) if e is None]
    screen = statistics.median(whole_screens or screens) if screens else None
    count = sum(1 for point in curve if point.get("subset"))
    spent = metrics["time_breakdown_s"]["eval"]
    # the first evaluation has no gap before it: counted as one whole screen, its one-off costs in the rest
    rest = spent - sum(screens) - screen - sum(wholes) if screen is not None else None
    return {"batch": metrics.get("batch_size"), "screen_s": screen, "screens": count, "whole_s": wholes[-1] if wholes else None,
            "screens_s": sum(screens) + (screen or 0), "ended": sum(1 for e in ended if e is not None),
            "samples": [e for e in ended if e is not None],
            "eval_s": spent, "rest_s": rest, "train_s": metrics["time_breakdown_s"]["train"]}


def main(path: str) -> None:
    print("| run | batch | screens | ended early (samples each) | a whole screen (s, median) | all screens (s) | "
          "the whole split (s) | eval (s) | the rest (s) | train (s) | eval / train |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tarfile.open(path) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if not member.name.endswith("metrics.json"):
                continue
            metrics = json.load(tar.extractfile(member))
            if not (metrics.get("target") or {}).get("curve"):
                continue
            c = costs(metrics)
            f = lambda v: "" if v is None else f"{v:.3f}"  # noqa: E731
            ended = f"{c['ended']} ({', '.join(map(str, c['samples']))})" if c["ended"] else "0"
            print(f"| {member.name.rsplit('/', 1)[0]} | {c['batch']} | {c['screens']} | {ended} | {f(c['screen_s'])} | "
                  f"{f(c['screens_s'])} | {f(c['whole_s'])} | {c['eval_s']:.2f} | {f(c['rest_s'])} | {c['train_s']:.1f} | "
                  f"{100 * c['eval_s'] / c['train_s']:.1f} % |")


if __name__ == "__main__":
    main(sys.argv[1])
