"""``python -m fastpipe``: the Hydra entry point. Compose, convert, hand over to the launcher."""
from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from fastpipe import results
from fastpipe.config import GROUPS, config_dir, register_configs, to_settings
from fastpipe.errors import EXIT_CODE, EXIT_PREEMPTED, FastpipeError

register_configs()


@hydra.main(version_base="1.3", config_path=config_dir(), config_name="config")
def run(cfg: DictConfig):
    """One job: returns its metrics (a sweep's callbacks read them from metrics.json)."""
    from fastpipe.launcher import launch
    from fastpipe.repeats import finished_metrics, launch_repeats
    from fastpipe.runtime import environment

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    choices = {g: str(hc.runtime.choices.get(g)) for g in GROUPS if g in hc.runtime.choices}
    overrides = list(hc.overrides.task)
    try:
        settings = to_settings(cfg, choices)
        settings.overrides = overrides
        if hc.mode == RunMode.MULTIRUN and settings.sweep.resume:
            done = finished_metrics(run_dir, overrides)  # this job already finished ok in this folder
            if done is not None:
                print(f"fastpipe: sweep.resume: {run_dir} finished ok earlier; skipped", flush=True)
                return done
            if settings.train.resume is None and (run_dir / "checkpoints").is_dir():
                settings.train.resume = "auto"  # a job stopped by a signal continues from its checkpoint
        metrics = launch_repeats(launch, settings, run_dir)  # report.repeats runs into repeat-K/
    except FastpipeError as exc:  # settings that cannot work: a failed row, one clear line
        metrics = results.failed(str(exc), choices, overrides, environment(None, 1))
        results.write(run_dir, metrics)
    if metrics.get("status") != "ok":
        print(f"fastpipe: error: {metrics.get('reason')}", file=sys.stderr, flush=True)
        if metrics.get("status") == "preempted":  # the stop signal was for the whole run or sweep
            sys.exit(EXIT_PREEMPTED)
        if hc.mode != RunMode.MULTIRUN:  # in a sweep a failed job is a row; the sweep goes on
            sys.exit(EXIT_CODE)
    return metrics


def main() -> None:
    run()


if __name__ == "__main__":
    main()
