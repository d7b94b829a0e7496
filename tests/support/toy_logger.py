"""A logger registered from outside fastpipe, as a project registers its own: its keys with their
defaults (the schema under ``register_logger``), and the class extending them with its hooks and what
it declares it writes (fastpipe/protocols.py's ``Logger``; docs/architecture.md, "Where a new option goes")."""
from __future__ import annotations

import json
from dataclasses import dataclass

from fastpipe.config.logger import register_logger


@register_logger("toy", "toy_logger.ToyLogger")
@dataclass
class ToyLoggerConfig:
    file: str = "toy.log"  # in the run folder: one JSON line per event


@dataclass(eq=False)
class ToyLogger(ToyLoggerConfig):
    writes = "its toy log (`toy.log`)"  # the sweep report's footer names it
    working_files = ("toy-store",)  # its store in the working folder, as MLflow's mlruns/: not project code

    def _line(self, run, event: str, values: dict) -> None:
        with open(run.dir / self.file, "a") as fh:
            fh.write(json.dumps({"event": event, "step": run.step, **values}) + "\n")

    def on_start(self, run) -> None:
        store = run.working_folder / "toy-store"
        store.mkdir(exist_ok=True)
        (store / f"{run.run_id}.txt").write_text(run.name)

    def on_window(self, run, scalars) -> None:
        self._line(run, "window", scalars)

    def on_eval(self, run, metrics) -> None:
        self._line(run, "eval", metrics)

    def on_end(self, run, record) -> None:
        self._line(run, "end", {"status": record.get("status")})
