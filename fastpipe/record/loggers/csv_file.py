"""logger=csv: ``<run>/metrics.csv``, one row per logged step and a column per scalar.

A step's window scalars, epoch time and held-out metrics share its row. Rows are appended as each
step's events end; a scalar seen for the first time (the first evaluation's ``val/...``) adds a column,
and the file is written again with the wider header, so it is a well-formed CSV whenever it is read.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Dict, List, Optional

from fastpipe.config.logger import CsvLoggerConfig
from fastpipe.files import atomic_write
from fastpipe.record.loggers import RunInfo


@dataclass(eq=False)
class CsvLogger(CsvLoggerConfig):
    writes = "`metrics.csv`"  # what it leaves in the run folder, as the sweep report says

    def __post_init__(self) -> None:
        self.columns: List[str] = ["step"]
        self.rows: List[Dict[str, float]] = []  # written rows, kept to write the file again with a new column
        self.pending: Optional[Dict[str, float]] = None
        self._path = None

    def _add(self, run: RunInfo, values: Dict[str, float]) -> None:
        if self.pending is not None and self.pending["step"] != run.step:
            self._flush()
        if self.pending is None:
            self._path = run.dir / self.file
            self.pending = {"step": run.step}
        self.pending.update(values)

    def _flush(self) -> None:
        row, self.pending = self.pending, None
        if row is None:
            return
        new = [k for k in row if k not in self.columns]
        self.rows.append(row)
        if new or len(self.rows) == 1:
            self.columns += new
            text = io.StringIO()
            writer = csv.DictWriter(text, fieldnames=self.columns, lineterminator="\n")
            writer.writeheader()
            writer.writerows(self.rows)
            atomic_write(self._path, text.getvalue(), fsync=False)  # as the appended rows, not synced
        else:
            with open(self._path, "a", newline="") as fh:
                csv.DictWriter(fh, fieldnames=self.columns, lineterminator="\n").writerow(row)

    def on_window(self, run: RunInfo, scalars: Dict[str, float]) -> None:
        self._add(run, scalars)

    def on_eval(self, run: RunInfo, metrics: Dict[str, float]) -> None:
        self._add(run, metrics)

    def on_end(self, run: RunInfo, record: dict) -> None:
        self._flush()
