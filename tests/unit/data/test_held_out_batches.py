"""Held-out batches read ahead in a background thread (data/held_out_batches.py, train.eval_read_ahead): kept once
read, an evaluation waits for the read and sees what it raised; the run's results do not change."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
from conftest import TINY, make_settings, run_in_process

from fastpipe.data import held_out_batches
from fastpipe.data.held_out_batches import KeptBatches, read_ahead, stop_reading
from fastpipe.errors import ConfigError

CPU = torch.device("cpu")


class Gated:
    """A loader whose pass waits at its second batch until ``gate`` is set; ``fail``: it raises there."""

    def __init__(self, n: int, fail: bool = False) -> None:
        self.n, self.fail, self.passes, self.gate, self.at_gate = n, fail, 0, threading.Event(), threading.Event()

    def __len__(self):
        return self.n

    def __iter__(self):
        self.passes += 1
        for i in range(self.n):
            if i == 1:
                self.at_gate.set()
                assert self.gate.wait(30)
                if self.fail:
                    raise OSError("the pack's chunk 3 is corrupt")
            yield torch.full((2, 3), float(i)), torch.tensor([i, i])


def test_a_read_ahead_keeps_the_pass_and_an_evaluation_waits_for_it():
    loader = Gated(3)
    kept = KeptBatches(loader)
    read_ahead([kept], CPU)
    assert loader.at_gate.wait(30) and kept.kept is None  # under way, in the background
    seen = []
    reading = threading.Thread(target=lambda: seen.extend(y[0].item() for _, y in kept))
    reading.start()
    reading.join(0.3)
    assert reading.is_alive() and not seen  # the evaluation waits for the read ahead
    loader.gate.set()
    reading.join(30)
    assert seen == [0, 1, 2] and loader.passes == 1 and kept.settled() == 6
    assert [y[0].item() for _, y in kept] == [0, 1, 2] and loader.passes == 1


def test_loaders_read_ahead_one_after_another_in_the_order_given():
    first, second = Gated(3), Gated(2)
    kept = [KeptBatches(first), KeptBatches(second)]
    read_ahead(kept, CPU)
    assert first.at_gate.wait(30)
    assert not second.at_gate.wait(0.3) and second.passes == 0  # not before the first has ended
    first.gate.set()
    second.gate.set()
    assert kept[0].settled() == 6 and kept[1].settled() == 4 and (first.passes, second.passes) == (1, 1)


def test_what_a_read_ahead_raised_is_raised_by_the_evaluation_and_the_next_one_reads_again():
    loader = Gated(3, fail=True)
    kept = KeptBatches(loader)
    read_ahead([kept], CPU)
    loader.gate.set()
    with pytest.raises(OSError, match="chunk 3 is corrupt"):
        list(kept)
    loader.fail = False
    assert [y[0].item() for _, y in kept] == [0, 1, 2] and loader.passes == 2 and kept.kept is not None


def test_a_read_ahead_stopped_with_its_run_keeps_nothing():
    loader = Gated(3)
    kept = KeptBatches(loader)
    read_ahead([kept], CPU)
    assert loader.at_gate.wait(30)
    stopping = threading.Thread(target=stop_reading, args=(kept, None))
    stopping.start()
    assert kept._stop.wait(30)  # asked to stop while its loader still reads the second batch
    loader.gate.set()
    stopping.join(30)
    assert not stopping.is_alive() and kept.settled() is None and kept.kept is None and loader.passes == 1


def test_a_read_ahead_without_room_stops_at_once_and_keeps_nothing(monkeypatch):
    monkeypatch.setattr(held_out_batches, "free_bytes", lambda device: 10)
    loader = Gated(3)
    loader.gate.set()
    kept = KeptBatches(loader)
    read_ahead([kept], CPU)
    assert kept.settled() is None and kept.refused and not loader.at_gate.is_set()  # stopped after one batch
    assert [y[0].item() for _, y in kept] == [0, 1, 2] and loader.passes == 2  # read through the loader


def test_what_is_kept_and_read_ahead_and_where_a_screen_may_end_early():
    """The whole split is not kept for a stream, with train.eval_batches or under data.resize_schedule;
    auto reads ahead on CUDA a loader fastpipe prepares on the device unless its host is bound to the
    thread that built it (DALI's decoder); a screen ends early only on kept batches of a bounded task
    without summarize, in one process."""
    from types import SimpleNamespace

    from fastpipe.data.device import DeviceLoader
    from fastpipe.train import evaluation
    from fastpipe.train.held_out import HeldOut, keeps_whole_split, reads_ahead

    splits = SimpleNamespace(val=list(range(8)))
    train = SimpleNamespace(eval_batches=None)
    assert keeps_whole_split(train, SimpleNamespace(resize_schedule=None), splits)
    assert not keeps_whole_split(SimpleNamespace(eval_batches=2), SimpleNamespace(resize_schedule=None), splits)
    assert not keeps_whole_split(train, SimpleNamespace(resize_schedule=[[0, 24], [0.5, 32]]), splits)
    on = SimpleNamespace(device=CPU)

    def held(host, device):
        return HeldOut(KeptBatches(DeviceLoader(host, on)), None, None, torch.device(device))

    assert reads_ahead("auto", held([], "cuda")) and not reads_ahead("auto", held([], "cpu"))
    assert reads_ahead(True, held([], "cpu")) and not reads_ahead(False, held([], "cuda"))
    assert not reads_ahead("auto", held(SimpleNamespace(thread_bound=True), "cuda"))

    kept = KeptBatches([(torch.zeros(2), torch.zeros(2))])
    list(kept)
    task = SimpleNamespace(bounds=(0.0, 1.0), primary="accuracy")
    target = SimpleNamespace(higher=True, value=0.9, metric="accuracy", hit=lambda v: v >= 0.9, screen_risk=0.0)

    def until(task=task, loader=kept, world=1, lockstep=False):
        screen = SimpleNamespace(loader=loader, dist=SimpleNamespace(world_size=world), lockstep=lockstep)
        return evaluation.Evaluator._out_of_reach(SimpleNamespace(g=SimpleNamespace(task=task), screen=screen,
                                                                  target=target))

    assert until().samples == 2
    assert until(loader=KeptBatches([])) is None  # nothing kept yet: the first screen is read whole
    assert until(world=2) is None and until(lockstep=True) is None and until(loader=[]) is None
    assert until(task=SimpleNamespace(bounds=None, primary="accuracy")) is None
    assert until(task=SimpleNamespace(bounds=(0.0, 1.0), primary="accuracy", summarize=lambda means: {})) is None


def test_eval_read_ahead_takes_auto_true_or_false():
    assert make_settings([]).train.eval_read_ahead == "auto"
    with pytest.raises(ConfigError) as refused:
        make_settings(["train.eval_read_ahead=yes"])
    assert str(refused.value) == "train.eval_read_ahead='yes': use auto, true or false"


def test_reading_ahead_changes_no_result_and_graph_txt_says_so(tmp_path):
    """A run reading its held-out batches ahead (true: on the CPU too) screens and evaluates what a run
    reading them at each evaluation does; auto on the CPU does not read ahead."""
    args = TINY + ["train.max_steps=6", "train.eval_every=2", "train.target=0.99", "train.target_eval_samples=16"]
    ahead = run_in_process(tmp_path / "ahead", [*args, "train.eval_read_ahead=true"])
    plain = run_in_process(tmp_path / "plain", [*args, "train.eval_read_ahead=false"])
    assert ahead["status"] == plain["status"] == "ok", ahead.get("reason")
    assert ahead["val_metrics"] == plain["val_metrics"]
    curves = [[(c["step"], c["subset"], None if c["subset"] else c["value"]) for c in m["target"]["curve"]]
              for m in (ahead, plain)]
    assert curves[0] == curves[1]  # the same screens and outcomes (a kept first screen may end early)
    assert "held-out batches read ahead" in Path(tmp_path / "ahead" / "graph.txt").read_text()
    assert "read ahead" not in Path(tmp_path / "plain" / "graph.txt").read_text()
