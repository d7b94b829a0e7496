"""A job's context: what the entry point knows of it besides its settings, for its record and trackers."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

STAGES = ("run", "job", "probe", "full", "trial")  # a single run; a grid sweep's job; halving; an Optuna trial


@dataclass
class RunContext:
    """Filled by the entry point (fastpipe/record/hydra_context.py); a run's trackers and callbacks see it."""

    params: Dict[str, Any] = field(default_factory=dict)  # the composed config, flattened, and every group choice
    stage: str = "run"  # one of STAGES
    sweep_dir: Optional[str] = None  # the sweep folder of a sweep's job
    job: Optional[int] = None  # the job's number in its sweep (Hydra's hydra.job.num)
    round: Optional[int] = None  # a halving probe's round
    repeat: Optional[int] = None  # report.repeats: which measurement of the job (0, 1, ...)
    trackers: Dict[str, Any] = field(default_factory=dict)  # the sweep's trackers (its trackers.json): MLflow's parent run
    code: Optional[Dict[str, Any]] = None  # metrics.json's code: the project's and fastpipe's commits
    code_diff: Optional[str] = None  # the working tree's changes (code.diff) when dirty and at most 1 MB


def flatten(node: Any, prefix: str = "") -> Dict[str, Any]:
    """``{"train.epochs": 3, "optimizer.betas": "[0.9, 0.95]"}``: a nested config as one level of numbers,
    strings, booleans and nulls (a list as its JSON text)."""
    if isinstance(node, dict):
        if not node and prefix:
            return {prefix: "{}"}
        out: Dict[str, Any] = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(node, (list, tuple)):
        node = json.dumps(list(node), default=str)
    elif not isinstance(node, (str, int, float, bool, type(None))):
        node = str(node)
    return {prefix: node} if prefix else {}


def param_text(value: Any) -> str:
    """A param as a tracker that keeps strings shows it: ``3``, ``0.1``, ``true``, ``null``, ``adamw``."""
    return value if isinstance(value, str) else json.dumps(value)
