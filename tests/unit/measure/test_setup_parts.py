"""setup_parts_s's first two parts: ``imports`` up to when the training process had imported, ``launch``
from then to the trainer's first line."""
from __future__ import annotations

import pytest

from fastpipe.measure.setup import PARTS, SetupParts


@pytest.mark.parametrize("imported_at,imports,launch", [
    (None, 10.0, 0.0),   # no process said when it imported (elastic workers, a run in this process): all imports
    (107.5, 7.5, 2.5),   # imported 7.5 s in; the config checked and the job begun 2.5 s later
    (95.0, 0.0, 10.0),   # a sweep's job in the sweep's own process, imported before it began: all launch
    (112.0, 10.0, 0.0),  # a mark after the trainer's first line cannot make imports longer than the span
])
def test_imports_end_where_the_training_process_had_imported_and_launch_takes_the_rest(imported_at, imports,
                                                                                       launch):
    parts = SetupParts(started_at=100.0, entered_at=110.0, imported_at=imported_at)
    record = parts.record(setup_s=12.0)
    assert list(record) == list(PARTS)
    assert (record["imports"], record["launch"]) == (imports, launch)
    assert sum(record.values()) == pytest.approx(12.0)  # "other" makes the parts add up to the set-up
