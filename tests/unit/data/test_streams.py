"""Streams (IterableDataset): a shard gives each sample to one reader; a stream trains; data=mmap refuses one."""
from __future__ import annotations

import pytest

from conftest import HERE_TESTS, run_in_process


STREAM = [f"hydra.searchpath=[file://{HERE_TESTS / 'conf'}]", "dataset=stream", "model._target_=fault_models.TabularNet",
          "train.batch_size=8", "data.num_workers=0", "measure.warmup_steps=2", "measure.window=3",
          "runtime.progress=false"]


# ------------------------------------------------------------------ streams
def test_a_stream_shard_gives_each_sample_to_one_reader():
    from stream_data import CountingStream

    from fastpipe.data.streams import Shard

    stream = CountingStream(size=40)
    seen = []
    for rank in range(2):
        shard = Shard(stream, rank, world=2, workers=1, quota_per_worker=16)
        seen += [int(x[0]) for x, _ in shard]
    assert len(seen) == 32 and len(set(seen)) == 32
    held = [int(x[0]) for rank in range(2) for x, _ in Shard(stream, rank, 2, 1, None)]
    assert sorted(held) == list(range(40))


def test_a_stream_trains_in_one_process_and_is_refused_by_mmap(tmp_path):
    m = run_in_process(tmp_path, STREAM + ["train.epochs=2"])
    assert m["status"] == "ok" and m["steps"] == 2 * (96 // 8) and m["val_metrics"] is not None
    assert "a stream (IterableDataset)  samples/epoch=96" in (tmp_path / "graph.txt").read_text()
    from fastpipe.errors import ConfigError

    with pytest.raises(ConfigError, match="data=mmap reads samples by index, but dataset=.* is a stream"):
        run_in_process(tmp_path / "b", [o for o in STREAM if not o.startswith("data.")] + ["data=mmap"])
