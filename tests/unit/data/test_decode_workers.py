"""data.decoder=cpu with data.decode_workers: a JPEG pack's batches decoded in worker processes are the
batches the in-process threads decode (order, labels, pixels), epoch after epoch, after an epoch left
early, from shards and for the held-out split; the setting's checks and its automatic value."""
from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
from conftest import cpu_runtime, make_settings

from fastpipe.config import MmapLoaderConfig
from fastpipe.data import build_loader
from fastpipe.data.splits import build_dataset
from fastpipe.errors import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")


def loader(folder, pack, workers, train=True):
    s = make_settings(["data=mmap", f"data.path={pack}", "dataset=imagefolder", f"dataset.root={folder}",
                       "dataset.image_size=24", "dataset.augment=false", "data.decoder=cpu",
                       f"data.decode_workers={workers}", "data.decode_threads=2", "runtime.progress=false"])
    runtime = dataclasses.replace(cpu_runtime(), device=torch.device("cpu"))
    splits = build_dataset(s.dataset, runtime, "imagefolder")
    return build_loader(s.data, splits, runtime, 8, s.seed, train, False)


def epochs(data, plan):
    """The batches of each epoch in ``plan`` ({epoch: batches to take, None = all})."""
    out = []
    for epoch, count in plan.items():
        data.set_epoch(epoch)
        out.append([(x.clone(), y.clone()) for x, y in itertools.islice(data, count)])
    return out


@pytest.mark.parametrize("pack", ["jpeg", "jpeg-shards"])  # conftest.py's packs
def test_worker_processes_give_the_batches_the_threads_give(folder, packs, pack):
    plan = {0: None, 1: 2, 2: None}  # epoch 1 left after two batches: epoch 2 still starts at its beginning
    threads, workers = loader(folder, packs[pack], 0), loader(folder, packs[pack], 2)
    assert "decoder=cpu (2 threads)" in threads.describe() and "threads=" in threads.describe()
    assert "decoder=cpu (2 worker processes)" in workers.describe() and "  threads=" not in workers.describe()
    for a, b in zip(epochs(threads, plan), epochs(workers, plan)):
        assert len(a) == len(b) > 0
        for (x, y), (u, v) in zip(a, b):
            assert torch.equal(y, v) and torch.equal(x, u)  # the same libjpeg-turbo: the same pixels
    held_out = [loader(folder, packs[pack], w, train=False) for w in (0, 2)]
    a, b = ([(x, y) for x, y in h] for h in held_out)
    assert len(a) == len(b) == 2 and all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(a, b))


def test_decode_workers_is_checked_and_its_automatic_value_leaves_the_training_process_cores():
    with pytest.raises(ConfigError, match="data.decode_workers"):
        make_settings(["data=mmap", "data.decode_workers=-1"])
    auto = MmapLoaderConfig()
    assert auto.decoding_workers("cpu", 16) == 0  # a CPU run: the step needs the cores
    assert [auto.decoding_workers("cuda", c) for c in (2, 5, 12, 16, 64)] == [1, 1, 8, 8, 8]
    assert MmapLoaderConfig(decode_workers=3).decoding_workers("cpu", 16) == 3


def test_decode_affinity_leaves_whole_physical_cores_to_the_training_process(monkeypatch):
    """16 CPUs, SMT siblings i and i + 8: the first 4 physical cores are CPUs 0-3 and 8-11."""
    from fastpipe.data.pack import workers

    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setattr(workers, "_siblings", lambda cpu: {cpu % 8, cpu % 8 + 8})
    assert workers.worker_cpus() == [4, 5, 6, 7, 12, 13, 14, 15]
    assert workers.worker_cpus(8) is None  # nothing left: the workers go where the OS puts them
    assert workers._span([4, 5, 6, 7, 12, 13, 14, 15]) == "4-7,12-15" and workers._span([3]) == "3"
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: {2, 3, 4, 10, 11, 12, 13})  # a container's share
    assert workers.worker_cpus(2) == [4, 12, 13]
