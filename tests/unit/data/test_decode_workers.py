"""data.decoder=cpu with data.decode_workers: a JPEG pack's batches decoded in worker processes are the
batches the in-process threads decode (order, labels, pixels), epoch after epoch, after an epoch left
early, from shards and for the held-out split; a ring slot kept while it may be copied; a killed worker,
a damaged or replaced pack in one line; the settings' checks, their automatic values and the CPUs
data.decode_affinity gives the workers."""
from __future__ import annotations

import dataclasses
import itertools
import os
import queue
import re
import shutil
import time

import numpy as np
import pytest
import torch
from conftest import cpu_runtime, make_settings

from fastpipe.config import MmapLoaderConfig
from fastpipe.data import build_loader
from fastpipe.data.pack import worker_loop, workers
from fastpipe.data.pack.format import TRAIN
from fastpipe.data.pack.reader import PackReader
from fastpipe.data.pack.shards import pack_version
from fastpipe.data.splits import build_dataset
from fastpipe.errors import ConfigError, DataError, EnvironmentProblem, FastpipeWarning

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")


def loader(folder, pack, workers, train=True, threads="auto"):
    s = make_settings(["data=mmap", f"data.path={pack}", "dataset=imagefolder", f"dataset.root={folder}",
                       "dataset.image_size=24", "dataset.augment=false", "data.decoder=cpu", "data.verify=false",
                       f"data.decode_workers={workers}", f"data.decode_threads={threads}", "runtime.progress=false"])
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


def test_worker_processes_give_the_batches_the_threads_give(folder, packs):
    pack = "jpeg-shards"  # conftest.py's packs; the one-file pack: the damaged-pack test below
    plan = {0: None, 1: 2, 2: None}  # epoch 1 left after two batches: epoch 2 still starts at its beginning
    threads, workers = loader(folder, packs[pack], 0, threads=2), loader(folder, packs[pack], 2)
    assert "decoder=cpu (2 threads)" in threads.describe() and "threads=" in threads.describe()
    assert "decoder=cpu (2 worker processes" in workers.describe() and "  threads=" not in workers.describe()
    rng = torch.get_rng_state()
    for a, b in zip(epochs(threads, plan), epochs(workers, plan)):
        assert len(a) == len(b) > 0
        for (x, y), (u, v) in zip(a, b):
            assert torch.equal(y, v) and torch.equal(x, u)  # the same libjpeg-turbo: the same pixels
    assert torch.equal(rng, torch.get_rng_state())  # the workers' seeds are not drawn from the global RNG
    held_out = [loader(folder, packs[pack], w, train=False) for w in (0, 2)]
    a, b = ([(x.clone(), y) for x, y in h] for h in held_out)
    assert len(a) == len(b) == 2 and all(torch.equal(x, u) and torch.equal(y, v) for (x, y), (u, v) in zip(a, b))


def test_a_decoded_batch_stays_intact_until_the_batch_after_the_next_is_asked_for(folder, packs):
    """The ring: a slot is not decoded into again while the consumer may still copy from it."""
    host = loader(folder, packs["jpeg"], 2).loader
    seen = []
    for x, _ in host.source.iterate(host.epoch_batches() * 3):  # more batches than the ring has slots
        if seen:
            assert torch.equal(seen[-1][0], seen[-1][1])  # the one before, untouched
        seen.append((x, x.clone()))
    assert len(seen) > len(host.source.ring)


def test_a_killed_decode_worker_is_one_line(folder, packs, monkeypatch):
    monkeypatch.setattr(workers, "POLL_S", 0.1)  # the training side's wait
    data = loader(folder, packs["jpeg"], 2)
    victim = data.loader.source.procs[1]
    victim.kill()
    victim.join()
    with pytest.raises(EnvironmentProblem, match=r"^a JPEG decode worker process \(fastpipe-decode-1\) was killed by "
                                                 r"signal 9 \(.+\); lower data.decode_workers, or set data.decode_workers=0"):
        list(data)
    # killed while it waited for a task, it holds the task queue's lock: the other cannot read its stop
    started = time.monotonic()
    data.loader.source.close()
    assert time.monotonic() - started < 10 and not any(p.is_alive() for p in data.loader.source.procs)


def test_a_damaged_or_replaced_pack_is_one_line_from_a_worker_too(folder, packs, tmp_path):
    """A JPEG whose first bytes are gone (read with data.verify=false), decoded by the threads, by worker
    processes and by a worker's loop run in this process; then a pack replaced after the run opened it."""
    damaged = tmp_path / "damaged.fppack"
    shutil.copy(packs["jpeg"], damaged)
    reader = PackReader(damaged)
    train = np.flatnonzero(reader.split == TRAIN)
    with open(damaged, "r+b") as f:
        f.seek(reader.data_offset + int(reader.offsets[train[1]]))  # a training image, not the one tried first
        f.write(b"\0\0")  # no SOI marker: not a JPEG any more
    line = rf"^pack {damaged}: a JPEG among images \d+\.\.\d+ does not decode \(.+\); check the pack with data.verify=true, or repack it$"
    with pytest.raises(DataError, match=line):
        list(loader(folder, damaged, 0))
    with pytest.raises(DataError, match=line):  # raised in a worker process, the same line here
        list(loader(folder, damaged, 1))
    identity, ring = pack_version(damaged), torch.empty((1, 8, 3, reader.height, reader.width), dtype=torch.uint8)

    def in_a_worker():  # a worker's loop, in this process: one task, then the end
        tasks, results = queue.Queue(), queue.Queue()
        for task in ((1, 0, 0, 0, train[:8]), None):
            tasks.put(task)
        worker_loop.work(damaged, identity, ring, tasks, results, None)
        return results.get_nowait()[-1]

    assert re.match(line, in_a_worker())
    os.utime(damaged, ns=(1, 1))
    assert in_a_worker() == (f"pack {damaged} was replaced after this run opened it; run again "
                             "(nothing should write a pack that a run reads)")
    with open(damaged, "r+b") as f:  # the first image too: refused when the loader is built
        f.seek(reader.data_offset)
        f.write(b"\0\0")
    with pytest.raises(DataError, match=rf"^pack {damaged}: its first JPEG does not decode \(.+\); check the pack "
                                        r"with data.verify=true, or repack it$"):
        loader(folder, damaged, 0)


def test_unused_decode_threads_are_a_warning_and_shared_memory_too_small_is_refused(folder, packs, monkeypatch):
    with pytest.warns(FastpipeWarning, match=r"data.decode_threads=3 does nothing here: the JPEGs are decoded in "
                                              r"worker processes \(data.decode_workers=1\); set data.decode_workers=0"):
        loader(folder, packs["jpeg"], 1, threads=3)
    # /dev/shm of 128 MB, 64 MB of it free (other rings in it)
    monkeypatch.setattr(workers.os, "statvfs", lambda path: os.statvfs_result((4096, 4096, 32768, 16384, 16384, 0, 0, 0, 0, 255)))
    with pytest.raises(EnvironmentProblem, match=r"^data.decode_workers keeps about 100 MB of decoded batches in "
                                                 r"/dev/shm, which has 64 MB free: give the container more"):
        workers._check_shared_memory(100, 2**20)
    workers._check_shared_memory(10, 2**20)  # 10 MB: fits
    # a container whose /dev/shm is nearly full: the sizes keep a digit that is not 0
    monkeypatch.setattr(workers.os, "statvfs", lambda path: os.statvfs_result((4096, 4096, 32768, 16, 16, 0, 0, 0, 0, 255)))
    with pytest.raises(EnvironmentProblem, match=r"keeps about 0.19 MB of decoded batches in /dev/shm, which has "
                                                 r"0.062 MB free: "):
        workers._check_shared_memory(2, 100_000)


def test_decode_workers_is_checked_and_its_automatic_values_leave_the_training_process_cores():
    with pytest.raises(ConfigError, match="data.decode_workers"):
        make_settings(["data=mmap", "data.decode_workers=-1"])
    auto = MmapLoaderConfig()
    assert auto.decoding_workers("cpu", 16) == 0  # a CPU run: the step needs the cores
    assert [auto.decoding_workers("cuda", c) for c in (2, 5, 6, 12, 16, 64)] == [0, 0, 2, 8, 12, 16]
    assert MmapLoaderConfig(decode_workers=3).decoding_workers("cpu", 16) == 3
    # an explicit count is bounded by the machine: the process's cores less the training's (at least 2)
    assert MmapLoaderConfig(decode_workers=2).decoding_workers("cpu", 2) == 2
    assert MmapLoaderConfig(decode_workers=12).decoding_workers("cuda", 16) == 12
    with pytest.raises(ConfigError, match=r"^data.decode_workers=1000 is more decoding processes than this process's 2 "
                                          r"cores can run beside its training \(at most 2\); use data.decode_workers=auto, "
                                          r"or a number up to 2$"):
        MmapLoaderConfig(decode_workers=1000).decoding_workers("cpu", 2)
    with pytest.raises(ConfigError, match=r"at most 12\)"):
        MmapLoaderConfig(decode_workers=13).decoding_workers("cuda", 16)
    # data.decoder=auto: worker processes on CUDA where 2 or more fit beside the training cores, else nvJPEG
    assert [auto.decoder_for("cuda", c) for c in (5, 6, 16)] == ["gpu", "cpu", "cpu"]
    assert MmapLoaderConfig(decode_workers=0).decoder_for("cuda", 16) == "gpu"  # threads: nvJPEG instead
    assert auto.decoder_for("cpu", 2) == "cpu" and MmapLoaderConfig(decoder="gpu").decoder_for("cuda", 64) == "gpu"


def test_decode_affinity_leaves_whole_physical_cores_to_each_training_process(monkeypatch):
    """32 CPUs, SMT siblings i and i + 16: a process's first 4 physical cores are CPUs 0-3 and 16-19."""
    from fastpipe import machine

    monkeypatch.setattr(machine.os, "sched_getaffinity", lambda pid: set(range(32)))
    monkeypatch.setattr(machine, "smt_siblings", lambda cpu: {cpu % 16, cpu % 16 + 16})
    assert machine.cpus_beyond(4) == [*range(4, 16), *range(20, 32)]
    assert machine.cpus_beyond(8, 2, 0) == list(range(8, 16)) and machine.cpus_beyond(8, 2, 1) == list(range(24, 32))
    assert machine.cpus_beyond(16) is None  # nothing left: the workers go where the OS puts them
    assert machine.cpu_list_text([4, 5, 6, 7, 12, 13, 14, 15]) == "4-7,12-15" and machine.cpu_list_text([3]) == "3"
    monkeypatch.setattr(machine.os, "sched_getaffinity", lambda pid: {2, 3, 4, 18, 19, 20, 21})  # a container's share
    assert machine.cpus_beyond(2) == [4, 20, 21]
