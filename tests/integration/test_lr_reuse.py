"""optimizer.lr=auto's range test run once and reused (issue 54: +sweep=lr ran it in every job of every round):
a train.lr_find_only run, then a run that reuses its test with its own factor. Two trainings in this process."""
from __future__ import annotations

from conftest import TINY, run_in_process

AUTO = [*TINY, "optimizer.lr=auto", "train.lr_find_steps=20", "train.lr_find_min=1e-4", "train.lr_find_max=1"]


def test_a_range_test_alone_is_reused_by_other_runs_with_their_own_factor(tmp_path, one_torch_thread):
    # issue 54: +sweep=lr ran the range test in every job of every round; one test, then reuse
    alone = run_in_process(tmp_path / "search", [*AUTO, "train.lr_find_only=true", "train.lr_find_seed=0"])
    assert alone["status"] == "ok" and alone["steps"] in (0, None) and not (tmp_path / "search" / "graph.txt").exists()
    assert (tmp_path / "search" / "lr_find.csv").exists() and alone["batch_size"] == 16
    reuse = [*AUTO, "train.lr_find_seed=0", f"train.lr_find_from={tmp_path / 'search'}", "optimizer.lr_auto_factor=3"]
    run = run_in_process(tmp_path / "run", reuse)
    search = run["lr_search"]
    assert search["suggestion"] == alone["lr_search"]["suggestion"] and search["factor"] == 3.0
    assert search["reused_from"] == str(tmp_path / "search") and search["curve"] == alone["lr_search"]["curve"]
    line = next(x for x in (tmp_path / "run" / "graph.txt").read_text().splitlines() if "optimizer" in x)
    assert f"range test in {tmp_path / 'search'})" in line
