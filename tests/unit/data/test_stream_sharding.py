"""Streams that split themselves (``set_shard``): each DataLoader worker of each rank reads only its
share, counted per reader; streams without it warn once; WebDataset and LitData folders split so."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import cpu_runtime
from stream_data import CountingStream, Indexed, SplittingStream

from fastpipe.config import DefaultLoaderConfig
from fastpipe.data import build_loader
from fastpipe.errors import DataError
from fastpipe.data.splits import DataSplits
from fastpipe.record.run_warnings import collect_warnings
from fastpipe.runtime import Dist


def loaders(train, val, world=2, workers=2, batch=4):
    """Each rank's (training, held-out) loader, data=default with ``workers`` worker processes."""
    splits = DataSplits("stream", train, val)
    cfg = DefaultLoaderConfig(num_workers=workers)
    return [(build_loader(cfg, splits, cpu_runtime(Dist(r, world, r, world)), batch, 0, True, False),
             build_loader(cfg, splits, cpu_runtime(Dist(r, world, r, world)), batch, 0, False, False))
            for r in range(world)]


def ids(loader):
    """The sample ids of each batch (a sample holds its id)."""
    return [x[:, 0].long().tolist() for x, _ in loader]


def read_by_reader(log: Path) -> dict:
    """{reader index: (process id, samples it produced)} from SplittingStream's logs; emptied after."""
    found = {}
    for f in log.glob("*.txt"):
        pid, index = (int(x) for x in f.stem.split("-"))
        found.setdefault(index, (pid, []))[1].extend(int(x) for x in f.read_text().split())
        f.unlink()
    return found


def test_two_ranks_of_two_workers_each_read_only_their_share(tmp_path):
    train = SplittingStream(size=96, epoch_length=80, log=str(tmp_path))  # quota 20 of each reader's 24
    val = SplittingStream(size=40, epoch_length=40, log=str(tmp_path))
    ranks = loaders(train, val)
    assert [len(tr) for tr, _ in ranks] == [10, 10]  # 80 samples / 2 ranks / batch 4: equal steps
    for epoch in (0, 1):
        yielded = []
        for tr, _ in ranks:
            tr.set_epoch(epoch)
            yielded += [i for batch in ids(tr) for i in batch]
        read = read_by_reader(tmp_path)
        assert sorted(read) == [0, 1, 2, 3]  # readers numbered rank by rank, worker by worker
        assert all(pid != os.getpid() for pid, _ in read.values())  # told in the worker that iterates
        assert all(len(samples) == 20 for _, samples in read.values())  # the quota, and nothing more read
        everything = [i for _, samples in read.values() for i in samples]
        assert sorted(everything) == sorted(yielded) and len(set(yielded)) == 80  # read = trained on, once
    held = [i for _, ev in ranks for batch in ids(ev) for i in batch]
    assert sorted(held) == list(range(40)) and len(read_by_reader(tmp_path)) == 4


def test_one_process_without_workers_is_its_own_reader(tmp_path):
    [(train, _)] = loaders(SplittingStream(size=24, epoch_length=24, log=str(tmp_path)), Indexed(), world=1, workers=0)
    assert sorted(i for batch in ids(train) for i in batch) == list(range(24))
    assert [(pid, len(s)) for pid, s in read_by_reader(tmp_path).values()] == [(os.getpid(), 24)]


def test_a_stream_without_set_shard_warns_once_naming_the_cost():
    with collect_warnings([]) as found:
        ranks = loaders(CountingStream(size=48, epoch_length=48), CountingStream(size=16, epoch_length=16),
                        world=1, workers=2)
    assert len(found) == 1 and "without set_shard(index, count)" in found[0] and "2x the reading" in found[0]
    assert sorted(i for batch in ids(ranks[0][0]) for i in batch) == list(range(48))  # today's behaviour
    with collect_warnings([]) as quiet:
        loaders(CountingStream(size=48, epoch_length=48), Indexed(), world=1, workers=0)
    assert quiet == []  # one reader reads what it needs


def batches_within(groups, per_reader):
    """Every batch comes from one reader's share, and every sample once."""
    flat = [i for b in groups for i in b]
    return len(flat) == len(set(flat)) and all(any(set(b) <= share for share in per_reader) for b in groups)


def test_webdataset_tar_shards_are_split_by_set_shard(tmp_path):
    wds = pytest.importorskip("webdataset", reason="pip install 'fastpipe[webdataset]' to test WebDataset shards")
    from fastpipe.data.stream_libs import TarShards

    for shard in range(8):  # 8 tar shards of 12 samples
        with wds.TarWriter(str(tmp_path / f"part-{shard:03d}.tar")) as sink:
            for i in range(shard * 12, shard * 12 + 12):
                sink.write({"__key__": f"s{i:05d}", "input.npy": np.full(4, i, np.float32), "cls": i % 2})
    stream = TarShards(str(tmp_path / "part-*.tar"), epoch_length=96)
    ranks = loaders(stream, Indexed())
    shares = [{i for s in range(r, 8, 4) for i in range(s * 12, s * 12 + 12)} for r in range(4)]  # reader r: shards r, r+4
    groups = [b for tr, _ in ranks for b in ids(tr)]
    assert batches_within(groups, shares) and len(groups) * 4 == 96
    with pytest.raises(DataError, match=r"no tar shards match '.*/nope-\*\.tar'; check the path"):
        TarShards(str(tmp_path / "nope-*.tar"), epoch_length=96)
    few = TarShards(str(tmp_path / "part-00[01].tar"), epoch_length=24)
    few.set_shard(3, 4)
    with pytest.raises(DataError, match=r"4 readers .* but 2 tar shard\(s\) .*: reader 3 has none; write at least 4"):
        next(iter(few))


def test_litdata_streaming_dataset_is_split_by_set_shard(tmp_path):
    pytest.importorskip("litdata", reason="pip install 'fastpipe[litdata]' to test LitData folders")
    from litdata.streaming.writer import BinaryWriter

    from fastpipe.data.stream_libs import LitDataStream

    writer = BinaryWriter(str(tmp_path), chunk_size=12)
    for i in range(96):
        writer[i] = {"x": np.full(4, i, np.float32), "y": i % 2}
    writer.done()
    writer.merge()
    stream = LitDataStream(str(tmp_path))
    assert stream.epoch_length == 96
    ranks = loaders(stream, Indexed())
    groups = [b for tr, _ in ranks for b in ids(tr)]
    shares = [set(range(r * 24, r * 24 + 24)) for r in range(4)]  # LitData's intervals for 4 "ranks" of one worker
    assert batches_within(groups, shares) and len(groups) * 4 == 96
    assert isinstance(next(iter(ranks[0][0]))[1], torch.Tensor)
