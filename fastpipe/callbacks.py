"""Hydra callbacks, registered in conf/config.yaml under ``hydra.callbacks``."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SweepReport(Callback):
    """When a ``-m`` sweep ends, write its report into the sweep folder and print the table."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from fastpipe.errors import EXIT_CODE, FastpipeError
        from fastpipe.report.publish import write_report
        from fastpipe.report.sweep import spec_from_config

        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            result = write_report(sweep_dir, spec_from_config(config))
        except FastpipeError as exc:  # e.g. a report.baseline that names no job: the jobs are safe
            print(f"fastpipe: error: sweep report not written: {exc}; the jobs' results are kept: fix it "
                  f"and run python -m fastpipe.report {sweep_dir}", file=sys.stderr, flush=True)
            sys.exit(EXIT_CODE)
        print((sweep_dir / "report.md").read_text(), flush=True)
        if result.best is not None:
            print(f"winner: {sweep_dir / 'best.yaml'}  (commit it: python -m fastpipe.report {sweep_dir} "
                  "--save-best conf/experiment/NAME.yaml)", flush=True)
