"""Where a launch's time before its first training step went: metrics.json's ``setup_parts_s``.

``time_breakdown_s.setup`` says how long a launch took to start training; ``SetupParts`` says on
what. The trainer opens one at its first line (``active``); the stage builders time their stage with
``setup_part(name)``, which does nothing outside an active one (a batch-size probe built in a test, a
trained run evaluated by ``fastpipe.evaluate``). Parts are exclusive: a part timed inside another
(the pack opened while the loader is built) counts only as itself, except inside a search, which
owns everything it builds (its probes' models and loaders are the search's cost, not the run's).

- ``imports``: the job's start until its training process had imported torch and the stages
  (``imports_done``): the process's start and its imports;
- ``launch``: from then to the trainer's first line: composing and checking the config, recording
  provenance (a single run), or handing the job to its fresh process (a sweep's job). A sweep's job
  that trains in the sweep's own process (``launcher.fresh_process=false``) imported before it
  started: its set-up is all ``launch``. Where no training process says when it imported (torch
  elastic's workers, a run in a test's process), ``imports`` takes the whole span and ``launch`` is 0;
- ``dataset_index``: the dataset callable (listing files, checking image headers, generating a
  built-in set the first time) and its split;
- ``pack_open``: data=mmap's pack found (or packed, the first time), opened and verified;
- ``loader_start``: building the loaders (DataLoader, reader threads, the held-out loaders);
- ``model_build``: the model constructed, initialised and placed (the launcher's build);
- ``first_batch_check``: a first batch of each split through the project's parts;
- ``batch_search``: ``train.batch_size=auto``'s probes; ``lr_search``: ``optimizer.lr=auto``'s;
- ``compile_setup``: wrapping the model with torch.compile (importing Dynamo and Inductor); the
  compilation itself, from Inductor's cache or not, runs in the first steps (``time_breakdown_s.compile``);
- ``other``: the rest up to the first step (the loggers' start, the runtime, graph.txt, a resume's
  checkpoint), so that the parts add up to ``time_breakdown_s.setup`` before the first step.
"""
from __future__ import annotations

import contextlib
import time
from typing import Dict, Iterator, List, Optional

PARTS = ("imports", "launch", "dataset_index", "pack_open", "loader_start", "model_build", "first_batch_check",
         "batch_search", "lr_search", "compile_setup", "other")
BEFORE_TRAINER = ("imports", "launch")  # measured from marks, not timed blocks
SEARCHES = ("batch_search", "lr_search")  # what they build inside them counts as theirs
_active: Optional["SetupParts"] = None
_imported_at: Optional[float] = None  # when this process had imported what training needs (Unix time)


def imports_done() -> None:
    """This training process has imported what its training needs: the ``imports`` part ends here
    (the first call counts: a process that trains several jobs imported before the first)."""
    global _imported_at
    if _imported_at is None:
        _imported_at = time.time()


class SetupParts:
    """The set-up parts of one launch (module docstring); ``entered_at``: the trainer's first line,
    ``started_at``: the job's start (``Config.started_at``), ``imported_at``: when the training process
    had imported (``imports_done``; None: unknown); Unix times."""

    def __init__(self, started_at: float, entered_at: Optional[float] = None,
                 imported_at: Optional[float] = None) -> None:
        self.entered_at = time.time() if entered_at is None else entered_at
        self.started_at = started_at or self.entered_at  # none given (a run in a test's process): from here
        self.imported_at = imported_at if imported_at is not None else _imported_at
        self._spent: Dict[str, float] = {name: 0.0 for name in PARTS if name not in BEFORE_TRAINER + ("other",)}
        self._stack: List[list] = []  # open parts: [name, start, time of parts inside it]
        self.closed = False

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Time the block as ``name``, less the parts opened inside it."""
        if name not in self._spent:
            raise ValueError(f"no set-up part {name!r}; the parts are {', '.join(PARTS)}")
        if self.closed or any(entry[0] in SEARCHES for entry in self._stack):
            yield
            return
        entry = [name, time.perf_counter(), 0.0]
        self._stack.append(entry)
        try:
            yield
        finally:
            self._stack.pop()
            spent = time.perf_counter() - entry[1]
            self._spent[name] += spent - entry[2]
            if self._stack:
                self._stack[-1][2] += spent

    def close(self) -> None:
        """Training begins: what is timed from now on is not set-up."""
        self.closed = True

    def _before_trainer(self) -> Dict[str, float]:
        """``imports`` and ``launch``: the job's start to the trainer's first line, split where the
        training process had imported (the whole span is ``imports`` when that is unknown)."""
        before = max(0.0, self.entered_at - self.started_at)
        if self.imported_at is None:
            return {"imports": before, "launch": 0.0}
        imports = min(before, max(0.0, self.imported_at - self.started_at))
        return {"imports": imports, "launch": before - imports}

    def record(self, setup_s: Optional[float]) -> Optional[Dict[str, float]]:
        """metrics.json's ``setup_parts_s`` for a launch whose first step began ``setup_s`` seconds
        after the job's start (None: no step ran, no record); ``other`` makes the parts add up."""
        if setup_s is None:
            return None
        parts = {**self._before_trainer(), **self._spent}
        parts["other"] = max(0.0, setup_s - sum(parts.values()))
        return {name: round(parts[name], 3) for name in PARTS}


def largest(parts: Optional[Dict[str, float]]) -> Optional[str]:
    """The name of the largest part, or None."""
    return max(parts, key=parts.get) if parts else None


@contextlib.contextmanager
def active(parts: SetupParts) -> Iterator[SetupParts]:
    """Make ``parts`` the one ``setup_part`` times into, for the block (the trainer's whole run)."""
    global _active
    previous, _active = _active, parts
    try:
        yield parts
    finally:
        _active = previous


def setup_part(name: str):
    """A context timing the block as set-up part ``name`` of the active launch (a no-op without one)."""
    return _active.part(name) if _active is not None else contextlib.nullcontext()


def recorded(setup_s: Optional[float]) -> Optional[Dict[str, float]]:
    """The active launch's ``setup_parts_s`` (``SetupParts.record``), or None without one."""
    return _active.record(setup_s) if _active is not None else None


def close() -> None:
    """The active launch's first step begins (a no-op without one)."""
    if _active is not None:
        _active.close()
