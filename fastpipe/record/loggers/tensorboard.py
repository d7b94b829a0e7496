"""logger=tensorboard (the default): ``<run>/tb`` event files of every window scalar and held-out metric, and
of optimizer.lr=auto's range test (``lr_find/loss``, ``lr_find/lr`` against the test's own steps)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

from fastpipe.config.logger import TensorBoardLoggerConfig
from fastpipe.record.loggers import RunInfo


@dataclass(eq=False)
class TensorBoardLogger(TensorBoardLoggerConfig):
    """TensorBoard's SummaryWriter, made at the first scalars (so ``tb/`` appears once training runs)."""

    writes = "TensorBoard scalars (`tb/`)"  # what it leaves in the run folder, as the sweep report says

    def __post_init__(self) -> None:
        self._writer = None

    def _writer_for(self, run: RunInfo):
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(run.dir / self.folder))
        return self._writer

    def _scalars(self, run: RunInfo, values: Dict[str, float]) -> None:
        writer = self._writer_for(run)
        for tag, value in values.items():
            writer.add_scalar(tag, value, run.step)

    def on_curve(self, run: RunInfo, tag: str, points: List[Tuple[int, float]]) -> None:
        """A curve on its own step axis (``lr_find/loss``: the range test's steps), one scalar per point."""
        writer = self._writer_for(run)
        for step, value in points:
            writer.add_scalar(tag, value, step)

    def on_window(self, run: RunInfo, scalars: Dict[str, float]) -> None:
        self._scalars(run, scalars)

    def on_eval(self, run: RunInfo, metrics: Dict[str, float]) -> None:
        self._scalars(run, metrics)

    def on_end(self, run: RunInfo, record: dict) -> None:
        if self._writer is not None:
            self._writer.close()
