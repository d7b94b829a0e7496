"""The run's warnings: ``FastpipeWarning`` s raised anywhere while a job runs, collected for its record.

Builders and the loop warn where they find something (``warnings.warn(text, FastpipeWarning)``)
instead of passing a list around; the job wraps its work in ``collect_warnings(record_warnings)``.
Every warning is kept, also one raised again from the same line (Python's default shows each
location once), in the order raised, without duplicates.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Iterator, List

from fastpipe.errors import FastpipeWarning


@contextlib.contextmanager
def collect_warnings(into: List[str]) -> Iterator[List[str]]:
    """Append the text of each FastpipeWarning raised inside to ``into``; other warnings pass on."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", FastpipeWarning)
        previous = warnings.showwarning

        def keep(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, FastpipeWarning):
                text = str(message)
                if text not in into:
                    into.append(text)
            else:
                previous(message, category, filename, lineno, file, line)

        warnings.showwarning = keep
        yield into
