"""report.png a person can read at 4, 16 and 40 jobs (issue 33, item 4), and its race panel (issue 31,
item 2): every text inside the figure, one colour per job, the winner alone outlined, each bar as long as
the number written after it, no legend over the data."""
from __future__ import annotations

import json
import os

import pytest
from matplotlib.colors import to_hex
from matplotlib.container import BarContainer

from figure_checks import drawn_texts, overlapping, texts_outside
from plot_sweeps import race_sweep, target_sweep
from fastpipe.report.sweep_folder import load_jobs
from fastpipe.report.plot_parts import ELIMINATED
from fastpipe.report.race_panel import cells
from fastpipe.report.plots import DPI as REPORT_DPI
from fastpipe.report.plots import report_figure, write_plot
from fastpipe.report.aggregate import aggregate
from fastpipe.sweeps.race import rounds

DPI = REPORT_DPI  # report.png's own: the extents, so whether a text fits, depend on the dpi (as fast as a small one)


def figure(folder, spec, dpi=DPI):
    result = aggregate(folder, load_jobs(folder), spec)
    return result, report_figure(result, dpi=dpi)


def bars(ax):
    """{row: (length, filled, colour, edge width, edge colour)} of the bar panel."""
    out = {}
    for container in ax.containers:
        if isinstance(container, BarContainer):
            bar = container.patches[0]
            filled = bar.get_facecolor()[3] > 0
            colour = to_hex(bar.get_facecolor() if filled else bar.get_edgecolor())
            out[round(bar.get_y() + bar.get_height() / 2)] = (bar.get_width(), filled, colour, bar.get_linewidth(),
                                                              to_hex(bar.get_edgecolor()))
    return out


@pytest.fixture(scope="module", params=[4, 16, 40])
def sweep(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"jobs{request.param}")
    spec = target_sweep(folder, request.param)
    result, fig = figure(folder, spec)
    yield request.param, result, fig


def test_every_text_of_the_report_plot_fits_inside_it_and_no_two_row_labels_collide(sweep):
    n, result, fig = sweep
    assert texts_outside(fig) == []
    ax = fig.axes[0]
    assert len(ax.get_yticklabels()) == n and overlapping(ax.get_yticklabels()) == []
    assert all(a.get_legend() is None for a in fig.axes)  # labels beside the lines instead
    curve_labels = [t for t in drawn_texts(fig) if t.axes is fig.axes[1] and t.get_text().startswith("#")]
    assert 3 <= len(curve_labels) <= 8 and overlapping(curve_labels) == []


def test_each_bar_is_the_time_to_target_its_label_states_and_colours_are_one_per_job(sweep):
    n, result, fig = sweep
    drawn = bars(fig.axes[0])
    assert len({d[2] for d in drawn.values()}) == len(drawn) == n - 1  # one colour each; the failed job: no bar
    for y, r in enumerate(result.rows):
        if r["status"] == "failed":
            assert y not in drawn
            continue
        length, filled, _, width, edge = drawn[y]
        label = next(t.get_text() for t in fig.axes[0].texts if round(t.xy[1]) == y)
        if r["target_reached"]:  # the bar is the time to target, never the throughput
            assert filled and length == r["time_to_target_s"] and label.startswith(f"{length:,.1f} s")
        else:  # job 1: the fastest per sample, it never reached the target: an open bar to where it stopped
            assert not filled and length == r["target_seconds"] and label.startswith(f"> {length:,.1f} s")
        assert (edge == "#000000" and width > 2) == bool(r["best"])  # the winner alone is outlined
    # one run per job by time to target: no winner (issue 54), so no bar says best and none is outlined
    assert result.best is None and sum(t.get_text().endswith("· best") for t in fig.axes[0].texts) == 0


@pytest.mark.parametrize("n", [4, 16, 40])
def test_a_throughput_sweep_draws_throughput_with_its_speed_up(tmp_path, n):
    spec = target_sweep(tmp_path, n, objective="throughput")
    result, fig = figure(tmp_path, spec)
    assert texts_outside(fig) == []
    ax = fig.axes[0]
    assert len(ax.get_yticklabels()) == n and overlapping(ax.get_yticklabels()) == []
    assert overlapping(list(ax.texts)) == [] and all(a.get_legend() is None for a in fig.axes)
    drawn = bars(ax)
    assert len({d[2] for d in drawn.values()}) == len(drawn) == n - 1  # one colour each; the failed job: no bar
    for y, r in enumerate(result.rows):
        if r["throughput"] is None:
            assert y not in drawn and r["status"] == "failed"
            continue
        length, filled, _, width, edge = drawn[y]
        label = next(t.get_text() for t in ax.texts if t.xycoords == "data" and round(t.xy[1]) == y)
        assert filled and length == r["throughput"] and label.startswith(f"{length:,.1f}/s")  # the bar is the number
        assert (edge == "#000000" and width > 2) == bool(r["best"])  # the winner alone is outlined
    best = [round(t.xy[1]) for t in ax.texts if t.get_text().endswith("· best")]
    winner = [] if result.best is None else [[r["job"] for r in result.rows].index(result.best["job"])]
    assert best == winner  # the winner's bar alone says best; a lead within the noise names none (issue 54)
    assert "samples/s" in ax.get_xlabel()


def test_the_race_panel_shows_every_seeds_time_misses_caps_and_greys_the_eliminated(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # the race's 90 record writes: durability is not tested here
    spec = race_sweep(tmp_path, 8)
    record = rounds.read(tmp_path)
    result, fig = figure(tmp_path, spec)
    assert texts_outside(fig) == []
    panel = fig.axes[-1]
    assert "tie: jobs 0, " in " ".join(panel.get_title(loc="left").split())
    order = [int(t.get_text()[1:]) for t in panel.get_yticklabels()]
    assert sorted(order) == list(range(8)) and order[:4] == [r["job"] for r in result.rows][:4]
    for label in panel.get_yticklabels():  # eliminated: grey; the others: their job's colour in every panel
        num = int(label.get_text()[1:])
        gone = str(num) in record.eliminated
        assert (to_hex(label.get_color()) == ELIMINATED) == gone
    texts = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in panel.texts
             if t.get_transform() == panel.transData}
    assert texts == {k: v[0] for k, v in cells(record, order).items()}
    first = record.rounds[0]
    missed = next(n for n in first["jobs"] if first["values"].get(str(n), 0) is None)
    assert texts[order.index(missed), 0] == "miss" and "cap" in texts.values() and "failed" in texts.values()
    for (row, col), text in texts.items():
        value = record.rounds[col]["values"].get(str(order[row]))
        assert value is None or text == f"{value:,.1f}"


def test_write_plot_writes_a_png_under_the_sweep(tmp_path):
    spec = target_sweep(tmp_path, 4)
    result = aggregate(tmp_path, load_jobs(tmp_path), spec)
    write_plot(result, tmp_path / "report.png", dpi=DPI)
    assert (tmp_path / "report.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "0" / "metrics.json").read_text())["target"]["curve"]  # the curves panel's data
