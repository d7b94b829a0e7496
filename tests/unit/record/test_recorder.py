"""The run folder's loss.png: a title of every group's choice fits the figure."""
from __future__ import annotations

from fastpipe.record.recorder import LOSS_DPI, RunRecorder, loss_figure

# What a run titles its plot with: each group's choice (ten groups)
CHOICES = ("data=default precision=fp32 compile=off launcher=single model=tiny_cnn dataset=shapes profile=off "
           "task=classification optimizer=adamw lr_schedule=cosine")


def test_the_loss_plot_title_names_every_choice_inside_the_figure(tmp_path):
    fig = loss_figure([(5, 1.0), (10, 0.5), (15, 0.3)], CHOICES)
    fig.set_dpi(LOSS_DPI)
    fig.canvas.draw()
    title = fig.axes[0].title
    box = title.get_window_extent(fig.canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height  # nothing cut off
    assert title.get_text().split() == CHOICES.split()  # wrapped, not shortened
    RunRecorder(tmp_path).plot_loss([(5, 1.0), (10, 0.5)], CHOICES)
    assert (tmp_path / "loss.png").read_bytes()[:4] == b"\x89PNG"
