"""StepMeter: warm-up excluded, windows timed, data-wait counted, numbers derived correctly."""
from __future__ import annotations

import pytest
import torch

from fastpipe.measure import steps as measure
from fastpipe.measure.steps import StepMeter


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
