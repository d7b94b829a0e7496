"""The run's clocks: exclusive parts, a resumed clock, and Inductor's cache counters (issue 22)."""
from __future__ import annotations

import time

import pytest

from fastpipe.measure.clock import RunClock, cache_counts, compile_cache


def _nap() -> float:
    """Sleep 50 ms; the seconds it really took (more on a loaded machine)."""
    start = time.perf_counter()
    time.sleep(0.05)
    return time.perf_counter() - start


def test_parts_are_exclusive_and_the_breakdown_is_a_partition():
    clock = RunClock(started_at=time.time() - 1.0)  # one second of set-up before the first step
    clock.start()
    with clock.part("eval"):
        eval_s = _nap()
        with clock.part("checkpoint"):  # best.pt written during an evaluation: checkpoint time
            inner_s = _nap()
    clock.stop()
    with clock.part("checkpoint"):  # last.pt, after the training clock stopped
        last_s = _nap()
    b = clock.breakdown()
    # Each part is at least the naps it held and at most a little more (the clock's own bookkeeping).
    assert b["setup"] == pytest.approx(1.0, abs=0.05) and eval_s <= b["eval"] <= eval_s + 0.02
    assert inner_s + last_s <= b["checkpoint"] <= inner_s + last_s + 0.02 and b["train"] >= 0.0
    assert sum(b[k] for k in ("setup", "compile", "train", "eval", "checkpoint")) == pytest.approx(b["wall_s"], rel=0.02)
    assert eval_s + inner_s <= clock.elapsed() <= eval_s + inner_s + 0.02  # the training clock excludes last.pt


def test_a_resumed_clock_continues_and_keeps_the_first_launchs_setup():
    first = RunClock(started_at=time.time() - 2.0)
    first.start()
    state = dict(first.state(), seconds=30.0)
    second = RunClock(started_at=time.time() - 5.0)  # a slower restart: not on the clock
    second.resume(state)
    assert second.elapsed() == 30.0
    second.start()
    assert 30.0 <= second.elapsed() < 30.5 and second.end_to_end(30.0) == pytest.approx(32.0, abs=0.05)
    assert RunClock(budget_s=1.0).over_budget() is False


def test_the_compile_cache_state_comes_from_inductors_counters():
    from torch._dynamo.utils import counters

    before = cache_counts()
    counters["inductor"]["fxgraph_cache_hit"] += 3
    counters["aot_autograd"]["autograd_cache_hit"] += 1
    warm = cache_counts()
    assert warm["fx_graph"]["hit"] == before["fx_graph"]["hit"] + 3
    delta = lambda a, b: {g: {k: a[g][k] - b[g][k] for k in a[g]} for g in a}  # noqa: E731
    assert compile_cache([delta(warm, before)], compiled=True)["state"] == "warm"
    assert compile_cache([{"fx_graph": {"hit": 0, "miss": 2, "bypass": 0},
                           "aot_autograd": {"hit": 0, "miss": 1, "bypass": 0}}], True)["state"] == "cold"
    two_ranks = compile_cache([{"fx_graph": {"hit": 2, "miss": 0, "bypass": 0}, "aot_autograd": {"hit": 1, "miss": 0, "bypass": 0}},
                               {"fx_graph": {"hit": 1, "miss": 1, "bypass": 0}, "aot_autograd": {"hit": 0, "miss": 1, "bypass": 0}}], True)
    assert two_ranks["state"] == "partial" and two_ranks["fx_graph"] == {"hit": 3, "miss": 1, "bypass": 0}
    assert compile_cache([before], compiled=False) is None
