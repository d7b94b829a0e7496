"""DeviceLoader.close and reading_ends_with_the_run (fastpipe/data/device.py): a run's end stops its
DataLoader workers at once, whatever state its passes are in, and never turns into the run's error."""
from __future__ import annotations

import multiprocessing
import threading
import time
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from fastpipe.data.device import DeviceLoader, MovePrep, PassClosed, reading_ends_with_the_run
from fastpipe.errors import FastpipeWarning


class Numbers(Dataset):
    """Sample i is (i, i), read in ``delay`` seconds; sample ``bad`` raises in the worker that reads it."""

    def __init__(self, n: int = 16, bad: int = -1, delay: float = 0.0) -> None:
        self.n, self.bad, self.delay = n, bad, delay

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if i == self.bad:
            raise RuntimeError(f"sample {i} is unreadable")
        time.sleep(self.delay)
        return torch.tensor([float(i)]), i


def device_loader(dataset, **kwargs) -> DeviceLoader:
    loader = DataLoader(dataset, batch_size=4, num_workers=1, **kwargs)
    return DeviceLoader(loader, MovePrep(torch.device("cpu")))


def workers_alive(before) -> set:
    return set(multiprocessing.active_children()) - before


def test_close_ends_a_pass_under_way_and_an_epoch_started_early():
    before = set(multiprocessing.active_children())
    loader = device_loader(Numbers())
    batches = iter(loader)
    next(batches)  # a pass under way, its worker alive; kept here as a failed run's traceback would
    assert workers_alive(before)
    loader.close()
    assert not workers_alive(before)
    loader.start_early(0)
    assert workers_alive(before)
    loader.close()
    assert not workers_alive(before)


def test_an_error_in_a_worker_ends_the_workers_and_a_persistent_loader_reads_again():
    before = set(multiprocessing.active_children())
    loader = device_loader(Numbers(bad=5), persistent_workers=True)
    with pytest.raises(RuntimeError, match="sample 5 is unreadable") as raised:
        list(loader)
    assert raised.tb is not None and not workers_alive(before)  # the traceback still holds the iterator
    loader.loader.dataset.bad = -1
    assert len(list(loader)) == 4  # persistent workers: the next pass starts new ones
    loader.close()
    assert not workers_alive(before)


def test_close_while_another_thread_runs_the_pass_ends_its_workers_and_raises_nothing():
    """The reader waits for a 1 s batch when the run ends: its workers, ended from this thread, would drop
    the batch they were sending, and torch would wait for it for ever (issue 53)."""
    before = set(multiprocessing.active_children())
    loader = device_loader(Numbers(n=4000, delay=0.25))
    started, stop, raised = threading.Event(), threading.Event(), []

    def read():  # a held-out read ahead still reading when the run ends
        try:
            for _ in loader:
                started.set()
                if stop.is_set():
                    return
        except Exception as exc:  # what a read ahead meets at the run's end, keeps nothing of, and drops
            raised.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert started.wait(30)
    time.sleep(0.1)  # the reader is inside the next batch's read
    loader.close()  # the generator is executing in the reader: no "generator already executing"
    stop.set()
    reader.join(20)
    assert not reader.is_alive() and not workers_alive(before)
    assert [type(e) for e in raised] == [PassClosed]  # not an end of the split: nothing of it is kept


def test_only_device_loaders_are_closed_and_a_failing_close_is_a_warning():
    class ProjectLoader:  # a project's loader whose close means something else
        closed = False

        def __iter__(self):
            return iter([])

        def close(self):
            ProjectLoader.closed = True

    class Broken(DeviceLoader):
        def close(self):
            raise OSError("no such device")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(KeyError):  # the run's own error is the one that leaves
            with reading_ends_with_the_run(ProjectLoader(), Broken([], MovePrep(torch.device("cpu"))), None):
                raise KeyError("the run's error")
    assert not ProjectLoader.closed
    assert [str(w.message) for w in caught if issubclass(w.category, FastpipeWarning)] == [
        "ending the data loader's reading at the run's end failed (OSError: no such device); the run's result "
        "stands, and its workers end with the process"]
