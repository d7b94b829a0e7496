"""Held-out batches read ahead in a background thread (data/kept.py, train.eval_read_ahead): kept once
read, an evaluation waits for the read and sees what it raised; the run's results do not change."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
from conftest import TINY, make_settings, run_in_process

from fastpipe.data.kept import KeptBatches
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
    kept.read_ahead(CPU)
    assert loader.at_gate.wait(30) and kept.kept is None  # under way, in the background
    seen = []
    reading = threading.Thread(target=lambda: seen.extend(y[0].item() for _, y in kept))
    reading.start()
    reading.join(0.3)
    assert reading.is_alive() and not seen  # the evaluation waits for the read ahead
    loader.gate.set()
    reading.join(30)
    assert seen == [0, 1, 2] and loader.passes == 1 and kept.samples == 6
    assert [y[0].item() for _, y in kept] == [0, 1, 2] and loader.passes == 1


def test_what_a_read_ahead_raised_is_raised_by_the_evaluation_and_the_next_one_reads_again():
    loader = Gated(3, fail=True)
    kept = KeptBatches(loader)
    kept.read_ahead(CPU)
    loader.gate.set()
    with pytest.raises(OSError, match="chunk 3 is corrupt"):
        list(kept)
    loader.fail = False
    assert [y[0].item() for _, y in kept] == [0, 1, 2] and loader.passes == 2 and kept.kept is not None


def test_a_cancelled_read_ahead_keeps_nothing_and_no_room_stops_it():
    loader = Gated(3)
    kept = KeptBatches(loader)
    kept.read_ahead(CPU)
    assert loader.at_gate.wait(30)
    stopping = threading.Thread(target=kept.cancel)
    stopping.start()
    loader.gate.set()
    stopping.join(30)
    assert not stopping.is_alive() and kept.kept is None and loader.passes == 1


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
