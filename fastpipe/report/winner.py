"""The winner as a Hydra config: best.yaml in the sweep folder, ``--save-best`` into a project.

The file is an experiment config (Hydra's "configuring experiments" pattern)::

    # @package _global_
    defaults:
      - override /precision: amp     # every group choice of the winning job, pinned
      ...
    train:
      max_steps: 12                  # its key overrides, as nested keys

Put it in a project's ``conf/experiment/NAME.yaml`` and run
``python -m fastpipe --config-dir conf +experiment=NAME``.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Dict, List

from omegaconf import OmegaConf

from fastpipe.record.overrides import override_key
from fastpipe.record.provenance import describe
from fastpipe.report.formats import metric_text

# Overrides that select a preset sweep or a ladder step: the step's group choices are pinned
# instead (ladder steps only choose groups, so nothing is lost).
FOLDED_GROUPS = ("sweep", "ladder")
SKIPPED_PREFIXES = ("sweep.", "report.")
EXPERIMENT = "experiment"  # the group the winner's file goes in


def winner_yaml(overrides: List[str], choices: Dict[str, str], comments: List[str]) -> str:
    """The experiment config that reproduces a job from its overrides and group choices."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    added, dropped, keys = [], [], OmegaConf.create({})
    for o in OverridesParser.create().parse_overrides(list(overrides)):
        key = o.key_or_group
        if key in FOLDED_GROUPS or key.startswith(SKIPPED_PREFIXES) or key in choices:
            continue  # sweep machinery, report settings, or a group pinned below
        if o.is_delete():
            dropped.append(o.input_line)
        elif o.is_add() and key == EXPERIMENT:  # the winner is an experiment itself: the job's is included
            added.append(f"  - /{EXPERIMENT}/{o.value()}")  # as a config, not a second choice of the group
        elif o.is_add() and "." not in key:  # +group=option: a config group the job added
            added.append(f"  - /{key}: {json.dumps(str(o.value()))}")
        else:
            OmegaConf.update(keys, key, o.value(), force_add=True)  # "a.b=1" -> a: {b: 1}
    lines = ["# @package _global_"] + [f"# {c}" if c else "#" for c in comments]
    lines += [f"# not expressible here, dropped: {d}" for d in dropped]
    lines += ["defaults:"] + added
    lines += [f"  - override /{g}: {_choice_yaml(str(c))}" for g, c in choices.items() if c not in (None, "None")]
    if len(keys):
        lines.append(OmegaConf.to_yaml(keys).rstrip())
    return "\n".join(lines) + "\n"


def _choice_yaml(choice: str) -> str:
    """A group choice in a defaults list: a name quoted, several (``[tensorboard,mlflow]``) as a YAML list."""
    if choice.startswith("[") and choice.endswith("]"):
        return "[" + ", ".join(json.dumps(c.strip()) for c in choice[1:-1].split(",") if c.strip()) + "]"
    return json.dumps(choice)


def command_line(overrides: List[str], choices: Dict[str, str]) -> str:
    """The same job as one ``python -m fastpipe ...`` command: pinned choices, then key overrides."""
    kept = [o for o in overrides if override_key(o) not in FOLDED_GROUPS and override_key(o) not in choices
            and not override_key(o).startswith(SKIPPED_PREFIXES)]
    pinned = [f"{g}={c}" for g, c in choices.items() if c not in (None, "None")]
    return " ".join(["python -m fastpipe"] + [shlex.quote(o) for o in pinned + kept])


def experiment_hint(path: Path, sweep_dir: Path) -> str:
    """How to run a winner saved at ``path`` from the sweep in ``sweep_dir``: by name when it sits in an
    ``experiment/`` folder, else how to save it there."""
    path = Path(path)
    if path.parent.name == EXPERIMENT:
        return f"python -m fastpipe --config-dir {path.parent.parent} +experiment={path.stem}"
    return (f"save it as <your conf>/experiment/NAME.yaml (python -m fastpipe.report {sweep_dir} "
            "--save-best conf/experiment/NAME.yaml), then: python -m fastpipe --config-dir conf +experiment=NAME")


def target_overrides(best: dict) -> List[str]:
    """The job's target settings, kept in best.yaml even where a config file (not the command line) set them."""
    if best.get("target") is None:
        return []
    keys = {"train.target": best["target"], "train.eval_every": best.get("target_eval_every"),
            "train.target_eval_samples": best.get("target_eval_samples"),
            "train.target_screen_risk": best.get("target_screen_risk")}
    given = {override_key(o) for o in best["overrides"]}
    return [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in keys.items() if v is not None and k not in given]


def winner_text(best: dict, result, path: Path) -> str:
    """best.yaml / --save-best content for the winning row at ``path``, with where it came from."""
    speed = "" if best["speedup"] is None else f", {best['speedup']:.2f}x the baseline (job {result.baseline['job']})"
    held = f"{best['metric']} {metric_text(best['metric'], best['metric_value'])}" if best["metric"] else "no held-out metric"
    if result.spec.objective == "time_to_target":
        sooner = (", the baseline itself" if best["baseline"] else "" if best["speedup"] is None else
                  f", {best['speedup']:.2f}x sooner than the baseline (job {result.baseline['job']})")
        line = (f"reached {best['target_metric']} {'>=' if best['target_higher'] else '<='} {best['target']:g} in "
                f"{best['time_to_target_s']:,.1f} s ({result.spec.target_clock} clock){sooner}; "
                f"{best['throughput'] or 0:,.1f} samples/s; {held}")
    else:
        line = f"{best['throughput']:,.1f} samples/s{speed}; {held} (parity {best['parity']})"
    overrides = list(best["overrides"]) + target_overrides(best)
    how_sure = [x[2:] for x in result.confidence.lines]
    if best is not result.best:  # written with --force: say what it was not separated from
        how_sure = [f"NOT A SEPARATED WINNER (written with --force): {x}" for x in how_sure]
    comments = [f"fastpipe sweep {'winner' if best is result.best else 'leader'}: job {best['job']} of "
                f"{result.sweep_dir}", line, *how_sure,
                f"code: {describe(best.get('code'))}",
                f"run it:  {experiment_hint(path, result.sweep_dir)}",
                f"same as: {command_line(overrides, best['choices'])}", ""]
    return winner_yaml(overrides, best["choices"], comments)
