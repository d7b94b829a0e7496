"""A process forked from the trainer never ends the trainer's DataLoader workers (issue 53: a race's run failed
with "DataLoader worker ... is killed by signal: Terminated" on a machine with memory to spare)."""
from __future__ import annotations

import multiprocessing
import multiprocessing.util
import os
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

import fastpipe.signals  # noqa: F401  (its fork hook is what is tested)


def test_a_forked_child_that_exits_through_python_leaves_the_parents_workers_alone():
    # multiprocessing's exit handler SIGTERMs every daemonic child in the list a raw fork copied; torch's
    # worker, signalled by another process than its parent, dies of it, and the parent's next batch raises
    loader = DataLoader(TensorDataset(torch.arange(64.0)), batch_size=4, num_workers=2, persistent_workers=True,
                        multiprocessing_context="fork", timeout=10)  # a dead worker fails, never hangs
    batches = iter(loader)
    next(batches)
    workers = list(batches._workers)
    pid = os.fork()
    if pid == 0:  # the child: what a Python exit runs, then out without anything else
        code = 0 if not multiprocessing.process._children else 3
        multiprocessing.util._exit_function()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    time.sleep(0.2)  # a SIGTERM sent would have landed
    assert os.waitstatus_to_exitcode(status) == 0  # the child saw no children of its parent
    assert len(list(batches)) == 15 and all(w.is_alive() for w in workers)
    del batches
