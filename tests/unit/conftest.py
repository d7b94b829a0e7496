"""Fixtures of the unit tier that several packages' tests share."""
from __future__ import annotations

import copy
import gc
from pathlib import Path

import pytest


@pytest.fixture
def app():
    """``python -m fastpipe ARGS`` in this process: (exit code, stdout, stderr)."""
    from conftest import in_process

    def run(*args):
        done = in_process(args)
        return done.returncode, done.stdout, done.stderr

    return run


_COMPOSED = {}


def composed(overrides):
    """conftest.make_settings(overrides), composed once per list of overrides in a test process; each call
    gets its own deep copy, equal to a fresh composition (nothing a test changes in it reaches another).
    A Hydra composition and its conversion cost 0.15-0.4 s, and the helpers that build loaders in
    test_mmap, test_records, test_packs, test_schedules and test_batch_size composed the same lists up to
    12 times a module. For settings that depend on the overrides and conf/ alone: not where a test
    registers a choice, hides a package or changes a file that the composition reads."""
    from conftest import make_settings

    key = tuple(overrides)
    if key not in _COMPOSED:
        _COMPOSED[key] = make_settings(list(key))
    return copy.deepcopy(_COMPOSED[key])


def run_composed(run_dir, overrides=()):
    """conftest.run_in_process on the settings of ``composed``: for the tests that run one command again
    (a requeue, a resume), whose every run composed the same list."""
    from fastpipe.job.training import run_training

    return run_training(composed(overrides), Path(run_dir))


@pytest.fixture(autouse=True, scope="module")
def outlived_objects_frozen():
    """After each test module (its own fixtures' teardown first), its garbage collected and every object
    that outlived it frozen (gc.freeze): a worker process of the tier holds torch, dynamo and what the
    modules before left, and each full collection, automatic or a gc.collect() in fastpipe (the range
    test's, the batch search's), walked all of it, 0.5-1 s late in the tier; now it walks what the
    current module made. A cycle that dies after its module is never freed: memory only, no test reads it."""
    yield
    gc.collect()
    gc.freeze()
