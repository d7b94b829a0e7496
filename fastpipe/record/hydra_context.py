"""A job's context for its record and trackers (config/context.py's RunContext), built where Hydra's
composed config still exists: the entry point's process, before the job is launched."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from fastpipe.config.run_context import RunContext, flatten
from fastpipe.record.loggers import trackers_file
from fastpipe.record.provenance import code_provenance

INTERNAL_KEYS = ("overrides", "choices", "run_id", "context", "hydra")  # filled by fastpipe, not configured


def params_of(cfg: DictConfig, choices: Dict[str, str], overrides: List[str]) -> Dict[str, object]:
    """The composed config as flat params (config/context.py's ``flatten``), with every group choice
    (``choices.precision``) and the job's command-line overrides."""
    try:
        container = OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # an interpolation only Hydra's runtime resolves: the text as written
        container = OmegaConf.to_container(cfg, resolve=False)
    params = flatten({k: v for k, v in container.items() if k not in INTERNAL_KEYS})
    params.update({f"choices.{group}": str(choice) for group, choice in choices.items()})
    params["overrides"] = " ".join(overrides)
    return params


def run_context(cfg: DictConfig, choices: Dict[str, str], overrides: List[str], place: dict,
                run_dir: Path, working_folder: Optional[Path] = None) -> RunContext:
    """The RunContext of the job in ``run_dir``: its params, its place in a sweep (``place``:
    sweeps/place.py), the sweep's trackers and the code it runs."""
    sweep_dir = place.get("sweep_dir")
    code, diff = code_provenance(working_folder or Path.cwd(), written=[p for p in (run_dir, sweep_dir) if p])
    return RunContext(params=params_of(cfg, choices, overrides), stage=place.get("stage", "run"),
                      sweep_dir=sweep_dir, job=place.get("job"), round=place.get("round"),
                      trackers=trackers_file.read(Path(sweep_dir)) if sweep_dir else {}, code=code, code_diff=diff)
