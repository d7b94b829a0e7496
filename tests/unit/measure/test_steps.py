"""StepMeter: warm-up excluded, windows timed, data-wait counted, numbers derived correctly; ranks combined."""
from __future__ import annotations

import pytest
import torch

from fastpipe.measure import steps as measure
from fastpipe.measure.steps import StepMeter, combine_ranks


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_throughput_excludes_warmup_and_counts_data_wait(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(measure.time, "perf_counter", clock)
    meter = StepMeter(torch.device("cpu"), warmup_steps=2, window=4)
    for step in range(10):
        t0 = meter.before_fetch()
        clock.now += 0.1 if step >= 2 else 5.0  # warm-up steps are slow (compilation)
        meter.after_fetch(t0)
        clock.now += 0.4
        meter.after_step(samples=32)
    m = meter.summary()
    assert m["warmup_s"] == pytest.approx(2 * (5.0 + 0.4))  # the two slow warm-up steps
    # 8 steady steps of 0.5 s each, 32 samples: 64 samples/s; data-wait 0.1 / 0.5
    assert m["throughput"] == pytest.approx(64.0)
    assert m["data_wait_frac"] == pytest.approx(0.2)
    assert m["step_time_ms"]["median"] == pytest.approx(500.0)
    assert m["measured_steps"] == 8 and m["step_time_ms"]["windows"] == 2
    assert m["gpu_util"] is None and m["peak_mem_kind"] == "cpu_max_rss_process"


def test_work_at_a_window_edge_counts_evaluation_does_not(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(measure.time, "perf_counter", clock)
    meter = StepMeter(torch.device("cpu"), warmup_steps=0, window=2)
    for step in range(1, 9):
        meter.before_fetch()
        clock.now += 0.5
        if meter.after_step(samples=10) and step == 4:
            clock.now += 2.0  # a checkpoint written at the edge: the next window pays for it
        if step == 6:
            meter.close_window()  # evaluation: outside the windows
            clock.now += 30.0
    m = meter.summary()
    assert m["measured_steps"] == 8
    assert m["throughput"] == pytest.approx(80 / (8 * 0.5 + 2.0))


def test_world_size_scales_throughput(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(measure.time, "perf_counter", clock)
    meter = StepMeter(torch.device("cpu"), warmup_steps=1, window=2, world_size=2)
    for _ in range(5):
        meter.after_fetch(meter.before_fetch())
        clock.now += 1.0
        meter.after_step(samples=10)
    assert meter.last_window_scalars()["train/throughput"] == pytest.approx(20.0)  # per-window estimate
    summary = meter.summary()
    assert summary["throughput"] == pytest.approx(10.0)  # this rank's own rate...
    assert measure.combine_ranks([summary, summary])["throughput"] == pytest.approx(20.0)  # ...summed by the job


def test_too_short_run_reports_no_throughput():
    meter = StepMeter(torch.device("cpu"), warmup_steps=5, window=2)
    meter.after_fetch(meter.before_fetch())
    meter.after_step(samples=4)
    assert meter.summary()["throughput"] is None


def test_combine_ranks_sums_throughput_and_reports_the_worst_rank():
    def summary(rate, wait, mem, median):
        return {"throughput": rate, "data_wait_frac": wait, "peak_mem_gb": mem, "gpu_util": None, "warmup_s": 1.0,
                "step_time_ms": {"median": median}, "measured_steps": 20, "peak_mem_kind": "cpu_max_rss_process"}

    job = combine_ranks([summary(100.0, 0.1, 2.0, 10.0), summary(90.0, 0.3, 1.5, 11.0)])
    assert job["throughput"] == pytest.approx(190.0)
    assert job["data_wait_frac"] == 0.3 and job["peak_mem_gb"] == 2.0
    assert job["step_time_ms"]["median"] == 11.0 and job["measured_steps"] == 20 and job["gpu_util"] is None
    assert job["per_rank"]["throughput"] == [100.0, 90.0] and job["per_rank"]["peak_mem_gb"] == [2.0, 1.5]
    assert combine_ranks([summary(None, None, 1.0, None), summary(5.0, 0.1, 1.0, 1.0)])["throughput"] is None
