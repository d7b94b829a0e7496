"""``python -m fastpipe.evaluate RUN_DIR [KEY=VALUE ...]``: a finished run's weights on a held-out split.

    python -m fastpipe.evaluate outputs/2026-11-30/10-00-00                      # best.pt on the val split
    python -m fastpipe.evaluate RUN --weights last --split test                  # the dataset's test split
    python -m fastpipe.evaluate RUN dataset.root=/data/other-images              # the same model, other data

The run's own config is rebuilt (``.hydra/config.yaml``), ``KEY=VALUE`` arguments change it (the
dataset's, for example), the task's metrics are computed as training computes them, and the result
is written to ``RUN_DIR/eval.json`` (``--out`` elsewhere). Exit code 0, or 2 with one line.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import List, Optional

from fastpipe.errors import EXIT_CODE, ConfigError, FastpipeError


def evaluate_run(run_dir: Path, overrides: List[str], weights: str = "best", split: str = "val",
                 device: str = "auto") -> dict:
    """The task's metrics of the run's ``weights`` on ``split``; also written to eval.json by ``main``."""
    from fastpipe.checkpoint.trained import load, weights_path
    from fastpipe.config.reload import run_settings
    from fastpipe.runtime import Dist, Runtime, cache_root, cpu_cores, resolve_device
    from fastpipe.train.held_out import evaluate
    from fastpipe.train.graph import build_held_out, build_splits

    weights_path(run_dir, weights, option="--weights {}")  # missing: the hint names this command's flag
    settings = run_settings(run_dir, overrides)
    settings.dataset.check()
    dev = resolve_device(device, Dist())
    trained = load(run_dir, weights, dev)
    runtime = Runtime(dev, Dist(), cache_root(), cpu_cores())
    name = settings.choices.get("dataset") or settings.dataset.short_name
    splits = build_splits(settings, runtime)
    if split == "test":
        if splits.test is None:
            raise ConfigError(f"dataset={name} has no test split (its callable returns no 'test'); use --split val")
        splits = dataclasses.replace(splits, val=splits.test)
    elif splits.val is None:
        raise ConfigError(f"dataset={name} has no held-out split to evaluate on")
    metrics = evaluate(build_held_out(settings, runtime, splits), trained.model)
    return {"run": str(run_dir), "weights": weights, "weights_of": trained.weights, "step": trained.step,
            "split": split, "dataset": name, "overrides": list(overrides), "task": settings.task.target,
            "metrics": metrics, "samples": len(splits.val) if hasattr(splits.val, "__len__") else None}


def main(argv: Optional[List[str]] = None) -> int:
    doc = __doc__.split("\n\n")
    p = argparse.ArgumentParser(prog="python -m fastpipe.evaluate", description=doc[0].split(": ", 1)[1],
                                epilog=doc[1] if len(doc) > 1 else None,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path, help="a finished run's folder (it holds checkpoints/best.pt or last.pt)")
    p.add_argument("overrides", nargs="*", help="KEY=VALUE settings changed for the evaluation (e.g. dataset.root=...)")
    p.add_argument("--weights", choices=("best", "last"), default="best")
    p.add_argument("--split", choices=("val", "test"), default="val")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--out", type=Path, help="where to write the result (default RUN_DIR/eval.json)")
    args = p.parse_args(argv)
    try:
        bad = [o for o in args.overrides if "=" not in o]
        if bad:
            raise ConfigError(f"{bad[0]!r}: give settings as KEY=VALUE, e.g. dataset.root=/data/images")
        result = evaluate_run(args.run_dir, args.overrides, args.weights, args.split, args.device)
    except FastpipeError as exc:
        print(f"fastpipe.evaluate: error: {exc}", file=sys.stderr)
        return EXIT_CODE
    out = args.out or args.run_dir / "eval.json"
    out.write_text(json.dumps(result, indent=2))
    shown = "  ".join(f"{k} {v:.4g}" for k, v in (result["metrics"] or {}).items())
    print(f"{result['weights']} weights (step {result['step']}) on {result['split']} ({result['samples']} samples): "
          f"{shown}\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
