"""optimizer.lr=auto (issue 32) where a compiler or a process group is what is tested: the range test
compiled (its rates set on the optimizer never recompile the step) and under DDP (every rank the same
ramp on its own batches, the loss averaged: one curve, one rate)."""
from __future__ import annotations

import pytest
import torch
from conftest import TINY, run_in_process

from fastpipe.finders import lr_curve, lr_range

AUTO = [*TINY, "optimizer.lr=auto", "train.lr_find_steps=20", "train.lr_find_min=1e-4", "train.lr_find_max=1",
        "train.max_steps=4"]  # a ramp over the rates where TinyCNN learns in 20 steps (its loss descends)


def test_a_compiled_range_test_compiles_its_step_once_and_the_run_trains(tmp_path, monkeypatch, one_torch_thread):
    graphs, release = [], lr_range._release
    torch._dynamo.reset()  # an earlier test's compiled TinyCNN would be reused here and count no graph at all
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]  # the process's count: other tests compiled too

    def counted(device):  # before the test's compiled code is dropped
        graphs.append(torch._dynamo.utils.counters["stats"]["unique_graphs"] - before)
        release(device)

    monkeypatch.setattr(lr_range, "_release", counted)
    m = run_in_process(tmp_path, [*AUTO, "compile=default"])
    assert m["status"] == "ok" and m["compile_fallback"] is None and len(m["lr_search"]["curve"]) == 20
    assert graphs and 1 <= graphs[0] <= 2  # the forward (and no graph per rate); 20 rates would be 20


def test_every_ddp_rank_runs_the_same_ramp_and_finds_the_same_rate(tmp_path):
    from lr_find_ranks import range_test_on_rank

    out = torch.multiprocessing.get_context("spawn").Manager().dict()
    torch.multiprocessing.start_processes(range_test_on_rank, args=(str(tmp_path / "store"),
                                          [*AUTO, "launcher=ddp"], out), nprocs=2, start_method="spawn")
    (curve0, rate0), (curve1, rate1) = out[0], out[1]
    assert curve0 == curve1 and rate0 == rate1 and len(curve0) == 20
    assert [lr for lr, _ in curve0] == pytest.approx(lr_curve.ramp(1e-4, 1.0, 20))
