"""Short runs in this process: a dataset without labels, the recipe's stages in a real run. (Runs long
enough to learn: tests/integration/test_learning.py.)"""
from __future__ import annotations

import pytest
import torch

from conftest import RESUMABLE, TINY, run_in_process, without_shapes


def test_synthetic_reports_null_accuracy(tmp_path):
    m = run_in_process(tmp_path, without_shapes(TINY) + ["dataset=synthetic", "dataset.num_images=64",
                                                         "dataset.image_size=16", "dataset.num_classes=10"])
    assert m["status"] == "ok" and m["accuracy"] is None and m["throughput"] > 0


def test_a_run_with_clipping_logs_the_norm_and_skips_an_overflow(tmp_path):
    m = run_in_process(tmp_path, RESUMABLE + ["train.max_steps=6", "train.checkpoint_every=0",
                                              "train.clip_grad_norm=0.5"])
    assert m["status"] == "ok" and m["grad_norm"] is not None and m["grad_norm"] > 0
    assert "clip_grad_norm=0.5" in (tmp_path / "graph.txt").read_text()


def test_a_run_with_ema_reports_the_averages_metrics_and_the_raw_ones(tmp_path):
    m = run_in_process(tmp_path, RESUMABLE + ["train.max_steps=8", "train.checkpoint_every=0", "train.ema_decay=0.5"])
    assert m["status"] == "ok" and m["weights"] == "ema"
    assert set(m["val_metrics"]) == set(m["val_metrics_raw"]) == {"accuracy", "loss"}
    saved = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)
    assert saved["weights"] == "ema" and saved["raw_model"] is not None


def test_early_stopping_ends_a_real_run_and_best_pt_survives_rotation(tmp_path):
    m = run_in_process(tmp_path, RESUMABLE + ["train.epochs=20", "train.eval_every=2", "train.early_stop_patience=2",
                                         "train.checkpoint_every=1", "train.keep_checkpoints=1",
                                         "optimizer.lr=1e-5"])  # too small a rate to improve: stops early
    assert m["status"] == "ok" and m["stopped_early"] and m["steps"] < 20 * 9
    best = torch.load(tmp_path / "checkpoints" / "best.pt", weights_only=True)
    assert best["step"] == m["best"]["step"] and best["metric"]["accuracy"] == pytest.approx(m["best"]["value"])
    assert len(list((tmp_path / "checkpoints").glob("step-*.pt"))) == 1  # rotation kept one, and best.pt
