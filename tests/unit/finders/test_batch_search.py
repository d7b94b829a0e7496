"""The batch-size search's algorithm (issue 27): bracket from train.batch_size_start, bisect on the grid.

Under a fake memory limit (the probe's fit test replaced: a size fits when it is at most the limit) the
search's answer is within one rounding step of an exhaustive search over every batch size, in few probes.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from fastpipe.finders import batch_size
from fastpipe.finders.batch_size import BatchSearch, Probe, on_grid
from fastpipe.finders.batch_size import start_for

CPU, GPU = torch.device("cpu"), torch.device("cuda")  # a device object needs no GPU
LIMITS = sorted({1, 2, 3, 7, 8, 9, 15, 16, 17, 100, 255, 256, 257, 1000, 2047, 2048, 2049, 3000, 3333, 4095,
                 4096, 5000} | set(range(1, 300, 13)))


def _search(monkeypatch, limit: int, start, rounding, cap: int = 4096, device=GPU):
    """The search's probes (in the order tried) under a memory that holds batches up to ``limit``: the
    probe's fit test is replaced, the search is the real one."""
    def probe(size):
        return Probe(size, size <= limit, why="" if size <= limit else "out of memory")

    first = start_for(SimpleNamespace(batch_size_start=start, batch_size_round=rounding), device, cap)
    return batch_size.search(probe, SimpleNamespace(world_size=1), cap, first, rounding)


def _exhaustive(limit: int, cap: int) -> int:
    """Every batch size from 1 to the cap tried: the largest that fits."""
    return max((size for size in range(1, cap + 1) if size <= limit), default=0)


@pytest.mark.parametrize("rounding", [8, "pow2"])
@pytest.mark.parametrize("start", [None, 8, 32, 100, 4096])
def test_answers_are_within_one_rounding_step_of_an_exhaustive_search(monkeypatch, rounding, start):
    cap = 4096
    for limit in LIMITS:
        probes = _search(monkeypatch, limit, start, rounding, cap)
        found = max((p.batch_size for p in probes if p.fits), default=0)
        best = _exhaustive(limit, cap)
        assert found <= best and all(p.fits == (p.batch_size <= limit) for p in probes)
        if rounding == 8:  # the multiple of 8 at or below the largest that fits (a power of two below 8)
            assert best - found < (8 if best >= 8 else found), (limit, start, found, best)
            assert found == on_grid(best, 8)
        else:  # the power of two at or below it
            assert found <= best < 2 * found, (limit, start, found, best)
        sizes = [p.batch_size for p in probes]
        assert len(sizes) == len(set(sizes)), f"a size was tried twice: {sizes}"
        assert len(sizes) <= 2 * math.log2(cap) + 2  # doubling/halving, then bisection: logarithmic


def test_a_gpu_search_from_256_brackets_by_doubling_then_bisects_in_multiples_of_8(monkeypatch):
    probes = _search(monkeypatch, limit=3333, start=None, rounding=8)
    sizes = [p.batch_size for p in probes]
    assert sizes[:5] == [256, 512, 1024, 2048, 4096] and not probes[4].fits
    assert all(s % 8 == 0 for s in sizes) and max(p.batch_size for p in probes if p.fits) == 3328
    assert len(sizes) == 5 + 8  # 2,048..4,096 bisected down to a step of 8: 8 more probes
    pow2 = _search(monkeypatch, limit=3333, start=None, rounding="pow2")
    assert [p.batch_size for p in pow2] == [256, 512, 1024, 2048, 4096]  # no bisection on the power-of-two grid


def test_a_search_that_starts_too_large_halves_then_bisects(monkeypatch):
    probes = _search(monkeypatch, limit=50, start=None, rounding=8)
    assert [p.batch_size for p in probes] == [256, 128, 64, 32, 48, 56]
    nothing = _search(monkeypatch, limit=0, start=None, rounding=8)
    assert [p.batch_size for p in nothing][-1] == 1 and not any(p.fits for p in nothing)


def test_default_starts_grid_and_logged_probe_count():
    cfg = SimpleNamespace(batch_size_start=None, batch_size_round=8)
    assert start_for(cfg, GPU, 4096) == 256 and start_for(cfg, CPU, 128) == 32 and start_for(cfg, GPU, 100) == 96
    assert [on_grid(n, 8) for n in (1, 3, 7, 8, 15, 100)] == [1, 2, 4, 8, 8, 96]
    assert [on_grid(n, "pow2") for n in (1, 3, 8, 100)] == [1, 2, 8, 64]
    search = BatchSearch("memory", 4096, 24, [Probe(16, True), Probe(24, True), Probe(32, False, why="oom")],
                         1.0, 32, 8)
    assert "3 probes from 32 in multiples of 8: 16, 24, 32 x" in search.describe()
    assert search.record()["probe_count"] == 3 and search.record()["round"] == 8
