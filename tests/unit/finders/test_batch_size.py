"""train.batch_size=auto (issue 16): the search and its record (train.lr_scaling: tests/unit/stages/test_optim.py)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from conftest import TINY, cpu_runtime, make_settings, run_in_process

from fastpipe.finders import batch_size
from fastpipe.finders.batch_size import BatchSearch, Probe
from fastpipe.finders.batch_size import find_batch_size
from fastpipe.errors import ConfigError, FastpipeError

from ..conftest import composed


def _settings(*extra):
    return composed([o for o in TINY if not o.startswith("train.batch_size")] + ["train.batch_size=auto", *extra])


def _fake_steps(monkeypatch, fits_up_to: int, rate=lambda size: 100.0 * size):
    """Replace the real step: sizes above ``fits_up_to`` run out of memory; ``rate`` gives samples/s."""
    tried = []

    def run_steps(settings, runtime, splits, size, check=False):  # check: the first-batch check (not faked)
        tried.append(size)
        if size > fits_up_to:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return size * batch_size.steps_for(settings.train.batch_size_goal)[1] / rate(size)

    monkeypatch.setattr(batch_size, "_run_steps", run_steps)
    # a fake step leaves no tensors to free: skip each probe's full garbage collection, which in a
    # test process holding the whole suite's objects costs a large share of a second
    monkeypatch.setattr(batch_size, "gc", SimpleNamespace(collect=lambda: 0))
    return tried


def test_batch_size_auto_is_a_value_and_nonsense_is_refused_when_composed():
    assert _settings().train.batch_size == "auto"
    for bad, key in (("train.batch_size=abc", "train.batch_size"), ("train.batch_size=0", "train.batch_size"),
                     ("train.batch_size_goal=speed", "batch_size_goal"), ("train.lr_scaling=cubic", "lr_scaling")):
        with pytest.raises(ConfigError, match=key):
            make_settings([bad])
    use = "is not valid; use 'auto' or an integer >= 1"
    for bad, line in (("train.eval_batch_size=abc", f"train.eval_batch_size='abc' {use}"),
                      ("train.eval_batch_size=0", f"train.eval_batch_size=0 {use}"),
                      ("train.batch_size_search_s=0", "train.batch_size_search_s=0 must be > 0 (seconds), or null for "
                                                      "no limit")):
        with pytest.raises(ConfigError) as refused:  # docs/errors/config.md's rows, word for word
            make_settings([bad])
        assert str(refused.value) == line


def test_memory_goal_doubles_until_out_of_memory_then_bisects_and_takes_the_largest_that_fit(monkeypatch):
    tried = _fake_steps(monkeypatch, fits_up_to=32)
    search = find_batch_size(_settings("train.batch_size_max=1024", "train.batch_size_start=8"), cpu_runtime())
    assert tried == [8, 16, 32, 64, 48, 40] and search.chosen == 32
    assert [(p.batch_size, p.fits) for p in search.probes] == [(8, True), (16, True), (32, True), (40, False),
                                                               (48, False), (64, False)]
    assert search.probes[-1].why == "out of memory" and "6 probes from 8" in search.describe()
    assert "8, 16, 32, 40 x, 48 x, 64 x" in search.describe()


def test_search_goes_below_the_start_when_it_does_not_fit_and_fails_clearly_at_one(monkeypatch):
    _fake_steps(monkeypatch, fits_up_to=2)
    assert find_batch_size(_settings(), cpu_runtime()).chosen == 2
    _fake_steps(monkeypatch, fits_up_to=0)
    with pytest.raises(FastpipeError, match="not even a batch of 1 fits"):
        find_batch_size(_settings(), cpu_runtime())


def test_throughput_goal_takes_the_fastest_that_fits(monkeypatch):
    _fake_steps(monkeypatch, fits_up_to=64, rate=lambda size: {8: 50, 16: 90, 32: 120, 64: 110}[size])
    settings = _settings("train.batch_size_goal=throughput", "train.batch_size_max=64", "train.batch_size_start=8")
    search = find_batch_size(settings, cpu_runtime())
    assert search.chosen == 32 and search.record()["probes"][2]["samples_per_s"] == pytest.approx(120)


def test_cpu_search_stops_at_the_cap_and_at_the_dataset(monkeypatch):
    _fake_steps(monkeypatch, fits_up_to=10**6)
    search = find_batch_size(_settings(), cpu_runtime())  # 240 images: more than the cap trains
    assert search.cap == batch_size.CPU_CAP and search.chosen == batch_size.CPU_CAP  # a CPU cannot catch OOM
    assert "capped at train.batch_size_max=128" in search.describe()
    small = find_batch_size(_settings("dataset.num_images=100"), cpu_runtime())  # 75 training images
    assert small.chosen == 72 and max(p.batch_size for p in small.probes) == 72  # the multiple of 8 below 75


def test_fsdp_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="launcher=fsdp.*train.batch_size=N"):
        find_batch_size(_settings("launcher=fsdp"), cpu_runtime())


def test_ranks_agree_on_sizes_that_fit_everywhere():
    rank0 = [Probe(8, True, 100.0), Probe(16, True, 150.0), Probe(32, False, why="out of memory")]
    rank1 = [Probe(8, True, 90.0), Probe(16, False, why="out of memory")]
    agreed = batch_size.agree([rank0, rank1])
    assert [(p.batch_size, p.fits) for p in agreed] == [(8, True), (16, False)]
    assert agreed[0].samples_per_s == pytest.approx(190.0)


def test_every_rank_follows_the_same_search_path(monkeypatch):
    """Rank 0 fits up to 16, rank 1 up to 4. Judged alone, rank 0 would search up from 8 and rank 1 down,
    sharing no size; judged together (every probe's verdict gathered) both go down to 4."""
    tried = {}

    def probe(size):
        tried["size"] = size
        return Probe(size, size <= 16, why="" if size <= 16 else "out of memory")

    monkeypatch.setattr(batch_size, "gather_objects", lambda fits, world_size: [fits, tried["size"] <= 4])
    probes = batch_size.search(probe, SimpleNamespace(world_size=2), 64, 8, 8)
    assert [(p.batch_size, p.fits) for p in probes] == [(8, False), (4, True)]  # no size of the grid between
    assert probes[0].why == "did not fit on every rank"


def test_a_run_with_auto_records_the_size_and_how_it_was_found(tmp_path):
    metrics = run_in_process(tmp_path, [o for o in TINY if not o.startswith("train.batch_size")]
                             + ["train.batch_size=auto", "train.batch_size_max=16", "train.batch_size_start=8"])
    assert metrics["status"] == "ok" and metrics["batch_size"] == 16
    record = json.loads((tmp_path / "metrics.json").read_text())["batch_size_search"]
    assert record["chosen"] == 16 and [p["batch_size"] for p in record["probes"]] == [8, 16]
    assert "batch_size=16/process (auto: largest that fits" in (tmp_path / "graph.txt").read_text()


def test_overfit_batches_cuts_the_dataset_at_the_size_the_search_found(tmp_path):
    """train.overfit_batches counts batches of a size auto has yet to find: the search probes the whole
    training split, then the run trains on the first batches of the size it found."""
    metrics = run_in_process(tmp_path, [o for o in TINY if not o.startswith(("train.batch_size", "train.max_steps"))]
                             + ["train.batch_size=auto", "train.batch_size_start=16", "train.batch_size_max=32",
                                "train.overfit_batches=2", "train.max_steps=4"])
    assert metrics["status"] == "ok" and metrics["batch_size"] == 32, metrics.get("reason")
    assert [p["batch_size"] for p in metrics["batch_size_search"]["probes"]] == [16, 32]
    graph = (tmp_path / "graph.txt").read_text()
    assert "steps/epoch=2" in graph and "overfit: the same first 2 batches every epoch" in graph


def test_the_search_trains_with_the_runs_ema(tmp_path):
    metrics = run_in_process(tmp_path, [o for o in TINY if not o.startswith("train.batch_size")]
                             + ["train.batch_size=auto", "train.batch_size_max=8", "train.ema_decay=0.9"])
    assert metrics["status"] == "ok" and metrics["batch_size"] == 8 and metrics["weights"] == "ema"


def test_search_record_round_trips():
    search = BatchSearch("memory", 64, 32, [Probe(32, True, 10.0, 1.5, seconds=0.5)], 3.2, 32, 8, 30.0)
    assert search.record() == {"goal": "memory", "cap": 64, "chosen": 32, "seconds": 3.2, "start": 32, "round": 8,
                               "probe_count": 1, "budget_s": 30.0, "cut_short": False,
                               "probes": [{"batch_size": 32, "fits": True, "samples_per_s": 10.0, "peak_mem_gb": 1.5,
                                           "why": "", "seconds": 0.5}]}


def test_each_probe_is_said_as_it_goes_and_the_time_budget_bounds_the_search(monkeypatch, capsys):
    _fake_steps(monkeypatch, fits_up_to=40)
    full = find_batch_size(_settings("train.batch_size_max=1024", "train.batch_size_start=8",
                                     "train.batch_size_search_s=null"), cpu_runtime())
    said = [line.split(": ", 2)[2] for line in capsys.readouterr().err.splitlines()
            if line.startswith("fastpipe: train.batch_size=auto: ")]
    assert [s.split()[0] for s in said] == [str(p) for p in [8, 16, 32, 64, 48, 40]]  # in the order tried
    assert said[1].startswith("16 fits: 1,600 samples/s") and said[3].startswith("64 does not fit (out of memory)")
    assert full.chosen == 40 and not full.cut_short and all(p.seconds is not None for p in full.probes)
    spent = find_batch_size(_settings("train.batch_size_max=1024", "train.batch_size_start=64",
                                      "train.batch_size_search_s=1e-9"), cpu_runtime())
    # spent at once: no doubling or bisecting, but halving goes on until a size fits
    assert [p.batch_size for p in spent.probes] == [32, 64] and spent.chosen == 32 and spent.cut_short
    assert "stopped by train.batch_size_search_s=1e-09" in spent.describe()


def test_eval_batch_size_auto_is_the_training_batch_and_a_number_is_taken_as_given():
    """auto evaluates at the training step's shapes (its autotuned convolutions, its memory)."""
    import dataclasses

    from fastpipe.train.held_out import eval_batch_size

    train = make_settings(TINY).train
    assert eval_batch_size(dataclasses.replace(train, batch_size=48)) == 48
    assert eval_batch_size(dataclasses.replace(train, batch_size=48, eval_batch_size=96)) == 96
