"""The run folder's loss.png (issue 33, item 4): a log axis when the loss falls more than 10x, the run's
overrides as its title, the held-out primary metric of each evaluation on a second axis, every text inside."""
from __future__ import annotations

import math

import pytest

from figure_checks import texts_outside
from fastpipe.record.loss_plot import LOSS_DPI, loss_figure, run_title
from fastpipe.record.recorder import RunRecorder
from fastpipe.record.run_record import RunRecord

# friedman's regression: 240 down to about 1 within 200 steps, then 1,800 steps of a flat line
FALL = [(s, 1.0 + 239.0 * math.exp(-s / 30)) for s in range(0, 2001, 20)]
FLAT = [(s, 0.70 + 0.02 * math.sin(s)) for s in range(0, 500, 10)]
OVERRIDES = ["+experiment=regression", "seed=0", "train.epochs=5", "optimizer.lr=0.01", "data=mmap",
             "precision=amp", "compile=max-autotune", "train.batch_size=512", "+task.label_smoothing=0.1",
             "dataset.root=/data/a/long/path/to/a/dataset/folder/that/goes/on/" + "and/on/" * 12 + "x"]


@pytest.mark.parametrize("history, log", [(FALL, True), (FLAT, False)])
def test_the_loss_axis_is_logarithmic_when_the_loss_falls_more_than_tenfold(history, log):
    fig = loss_figure(history, run_title(OVERRIDES[:2]))
    assert fig.axes[0].get_yscale() == ("log" if log else "linear")
    assert ("log scale" in fig.axes[0].get_ylabel()) == log


def test_the_title_is_the_runs_overrides_and_every_text_fits_inside_the_figure():
    fig = loss_figure(FALL, run_title(OVERRIDES), [(100, 0.4), (200, 0.8)], {"name": "r2", "higher_is_better": True})
    fig.set_dpi(LOSS_DPI)
    title = fig._suptitle.get_text()
    assert title.split()[:9] == OVERRIDES[:9] and "…" in title.split()[-1]  # a word too long: its middle cut
    assert title.split()[-1].endswith("/on/x") and "profile=off" not in title
    assert texts_outside(fig) == []
    assert run_title([]) == "the defaults (no overrides)"


def test_the_recorder_draws_the_held_out_primary_metric_of_each_evaluation_on_a_second_axis(tmp_path, monkeypatch):
    drawn = {}
    monkeypatch.setattr("fastpipe.record.recorder.write_loss_plot",
                        lambda path, history, overrides, evaluations, metric: drawn.update(
                            evaluations=evaluations, metric=metric, overrides=overrides))
    recorder = RunRecorder(tmp_path)
    recorder.evaluation(100, {"val/accuracy": 0.5, "val/loss": 1.2})
    recorder.evaluation(150, {"val_subset/accuracy": 0.9})  # a screened subset: not the held-out metric
    recorder.evaluation(200, {"val/accuracy": 0.8, "val/loss": 0.6})
    metric = {"name": "accuracy", "value": 0.8, "higher_is_better": True}
    record = RunRecord(overrides=["seed=1"], primary_metric=metric)
    recorder.plot_loss(FALL, record)
    assert drawn == {"evaluations": [(100, 0.5), (200, 0.8)], "metric": record.primary_metric, "overrides": ["seed=1"]}
    fig = loss_figure(FALL, "seed=1", drawn["evaluations"], drawn["metric"])
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "held-out accuracy (higher is better)"
    assert list(fig.axes[1].lines[0].get_xdata()) == [100, 200]


def test_loss_png_is_written_and_a_run_without_a_held_out_metric_has_one_axis(tmp_path):
    RunRecorder(tmp_path).plot_loss(FLAT, RunRecord(overrides=[]))
    assert (tmp_path / "loss.png").read_bytes()[:4] == b"\x89PNG"
    assert len(loss_figure(FLAT, "x", [], None).axes) == 1


def test_a_held_out_metric_spanning_more_than_10x_is_drawn_on_a_log_axis():
    """A regression's mse from 220 to 1.04: on a linear axis its end cannot be read."""
    mse = [(10, 220.0), (20, 31.0), (30, 4.2), (40, 1.04)]
    fig = loss_figure(FALL, "x", mse, {"name": "mse", "higher_is_better": False})
    assert fig.axes[1].get_yscale() == "log" and fig.axes[1].get_ylabel().endswith("(log scale)")
    fig = loss_figure(FALL, "x", [(100, 0.4), (200, 0.8)], {"name": "accuracy", "higher_is_better": True})
    assert fig.axes[1].get_yscale() == "linear" and "log" not in fig.axes[1].get_ylabel()
