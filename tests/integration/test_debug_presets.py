"""``+debug=overfit``: the same 4 batches for 200 steps, and the training loss falls near zero."""
from __future__ import annotations

from conftest import TINY, make_settings, run_in_process


def test_debug_overfit_trains_200_steps_on_4_batches_to_a_loss_near_zero(tmp_path, one_torch_thread):
    tiny = [o for o in TINY if not o.startswith(("train.max_steps", "train.batch_size", "dataset.image_size"))]
    # the preset's length; 8x8 images: 200 steps of them still learn the 4 batches by heart
    overrides = [*tiny, "+debug=overfit", "train.batch_size=8", "dataset.image_size=8", "logger=none"]
    settings = make_settings(overrides)
    assert (settings.train.overfit_batches, settings.train.max_steps) == (4, 200)
    record = run_in_process(tmp_path, overrides)
    assert record["status"] == "ok" and record["steps"] == 200
    assert record["final_loss"] < 0.05, record["final_loss"]
    assert record["val_metrics"]["accuracy"] == 1.0  # held out: those same 32 samples
    graph = (tmp_path / "graph.txt").read_text()
    assert "steps/epoch=4" in graph and "overfit: the same first 4 batches every epoch" in graph
