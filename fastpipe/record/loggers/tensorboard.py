"""logger=tensorboard (the default): ``<run>/tb`` event files of every window scalar and held-out metric."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

from fastpipe.config.logger import TensorBoardLoggerConfig
from fastpipe.record.loggers import RunInfo


@dataclass(eq=False)
class TensorBoardLogger(TensorBoardLoggerConfig):
    """TensorBoard's SummaryWriter, made at the first scalars (so ``tb/`` appears once training runs)."""

    writes = "TensorBoard scalars (`tb/`)"  # what it leaves in the run folder, as the sweep report says

    def __post_init__(self) -> None:
        self._writer = None

    def _scalars(self, run: RunInfo, values: Dict[str, float]) -> None:
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(run.dir / self.folder))
        for tag, value in values.items():
            self._writer.add_scalar(tag, value, run.step)

    def on_window(self, run: RunInfo, scalars: Dict[str, float]) -> None:
        self._scalars(run, scalars)

    def on_eval(self, run: RunInfo, metrics: Dict[str, float]) -> None:
        self._scalars(run, metrics)

    def on_end(self, run: RunInfo, record: dict) -> None:
        if self._writer is not None:
            self._writer.close()
