"""A run folder's artefacts besides metrics.json (graph.txt, loss.png, code.diff), and the run's loggers
and callbacks (record/loggers/), which see the run where the loop reports: window edges, evaluations,
checkpoints, the end."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

from fastpipe.record import results
from fastpipe.record.loss_plot import write_loss_plot
from fastpipe.record.run_record import RunRecord


class RunRecorder:
    """Writes a run folder's artefacts and feeds its loggers; every method is a no-op on non-zero ranks."""

    def __init__(self, run_dir: Path, enabled: bool = True, hooks=None) -> None:
        self.run_dir, self.enabled, self.hooks = Path(run_dir), enabled, hooks
        self.step = 0
        self.evaluations: List[Tuple[int, Dict[str, float]]] = []  # (step, val/* metrics): loss.png's second axis
        if enabled:
            self.run_dir.mkdir(parents=True, exist_ok=True)

    @classmethod
    def for_run(cls, settings, run_dir: Path, dist) -> "RunRecorder":
        """The recorder of the job ``settings`` describe, its loggers and callbacks started (rank 0 only)."""
        if not dist.is_main:
            return cls(run_dir, enabled=False)
        from fastpipe.record.loggers import RunInfo
        from fastpipe.record.loggers.dispatch import RunHooks

        recorder = cls(run_dir)
        if settings.context.code_diff is not None:
            recorder.write_text("code.diff", settings.context.code_diff.rstrip("\n"))
        hooks = list(settings.logger.values()) + list(settings.callbacks.values())
        recorder.hooks = RunHooks(hooks, RunInfo.of(settings, run_dir, dist.rank)) if hooks else None
        return recorder

    def scalars(self, step: int, values: Dict[str, Optional[float]]) -> None:
        """A window edge's (or an epoch end's) scalars, to every logger's ``on_window``."""
        self._send("window", step, values)

    def evaluation(self, step: int, metrics: Dict[str, Optional[float]]) -> None:
        """An evaluation's held-out metrics (``val/NAME``), to every logger's ``on_eval``."""
        if self.enabled:
            self.evaluations.append((step, dict(metrics)))
        self._send("evaluation", step, metrics)

    def _send(self, what: str, step: int, values: Dict[str, Optional[float]]) -> None:
        self.step = step
        values = {tag: float(value) for tag, value in values.items() if value is not None}
        if self.enabled and self.hooks is not None and values:
            getattr(self.hooks, what)(step, values)

    def curve(self, tag: str, points) -> None:
        """A curve measured against its own steps, not the training steps (the range test's loss and rate),
        to the loggers' ``on_curve``."""
        if self.enabled and self.hooks is not None and points:
            self.hooks.curve(tag, points)

    def checkpoint(self, step: int, path: Path) -> None:
        """A checkpoint complete on disk (called from the checkpoint writer's thread)."""
        if self.enabled and self.hooks is not None:
            self.hooks.checkpoint(step, path)

    def write_text(self, name: str, text: str) -> None:
        if self.enabled:
            (self.run_dir / name).write_text(text + "\n")

    def write_metrics(self, record: RunRecord) -> None:
        if self.enabled:
            results.write(self.run_dir, record)

    def finish(self, record: RunRecord) -> None:
        """metrics.json, then each logger's ``on_end`` (it may upload the file); a logger's failure, or one
        that never finished, becomes a warning of the record, written again."""
        self.write_metrics(record)
        if not self.enabled or self.hooks is None:
            return
        notes = [n for n in self.hooks.end(self.step, record.to_dict()) if n not in record.warnings]
        if notes:
            record.warnings.extend(notes)
            self.write_metrics(record)

    def plot_loss(self, history, record: RunRecord) -> None:
        """loss.png: the training loss at each window edge, the held-out primary metric of each
        evaluation beside it, titled by the run's overrides (record/loss_plot.py)."""
        if not self.enabled or not history:
            return
        metric = record.primary_metric
        tag = metric and f"val/{metric['name']}"
        evaluations = [(step, values[tag]) for step, values in self.evaluations if values.get(tag) is not None]
        write_loss_plot(self.run_dir / "loss.png", history, record.overrides, evaluations, metric)
