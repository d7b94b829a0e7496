"""A throughput ranking never crowns noise: one run wins only beyond its uncertainty (issue 54), repeats that spread or overlap are no winner,
and --save-best refuses them unless forced (issue 33 item 1)."""
from __future__ import annotations

from fastpipe.report.__main__ import main as report_main
from fastpipe.report.publish import write_report
from job_metrics import job_metrics as metrics
from job_metrics import make_sweep

TASK = ("seed=0,1",)


def repeated(median, low, high, step_ms=1.4):
    return metrics(median, repeats={"n": 3, "dirs": ["repeat-0", "repeat-1", "repeat-2"], "throughput": [low, median, high],
                                    "min": low, "max": high, "spread": (high - low) / median},
                   step_time_ms={"median": step_ms, "p90": step_ms})


def sweep(tmp_path, first, second):
    return make_sweep(tmp_path, [(("seed=0",), first), (("seed=1",), second)], task=TASK)


def test_one_run_per_job_names_a_winner_only_when_its_lead_is_beyond_the_noise(tmp_path, capsys):
    # issue 54: a grid with one run per job wrote best.yaml for a 1.36x lead that two such sweeps ordered
    # differently; now the lead must pass twice the runs' uncertainty (their windows and report.noise_floor)
    steady = {"median": 1.40, "p90": 1.5, "spread": 0.2, "windows": 16}
    clear = write_report(sweep(tmp_path / "clear", metrics(20_000.0, step_time_ms=dict(steady, median=1.43)),
                               metrics(79_600.0, step_time_ms=steady)))
    md = (tmp_path / "clear" / "report.md").read_text()
    assert clear.best["job"] == 1 and clear.confidence.kind == "separated"
    assert "- noise: one run per job: job 1 leads job 0 by 298.0 %; their lead is uncertain by ±5.8 %" in md
    assert "| step (ms) |" in md and "| 1.43 |" in md and "| 1.40 |" in md and (tmp_path / "clear" / "best.yaml").exists()
    close = write_report(sweep(tmp_path / "close", metrics(20_000.0, step_time_ms=steady),
                               metrics(22_000.0, step_time_ms=steady)))
    md = (tmp_path / "close" / "report.md").read_text()
    assert close.best is None and close.candidate["job"] == 1 and close.confidence.kind == "untested"
    assert "- too close to call: job 1 leads job 0 by 10.0 %; their lead is uncertain by ±5.8 %" in md
    assert "report.repeats=3" in md and not (tmp_path / "close" / "best.yaml").exists()
    assert report_main([str(tmp_path / "close"), "--quiet", "--save-best", str(tmp_path / "w.yaml")]) == 2
    assert "one run per job does not separate job 1 from the noise" in capsys.readouterr().err
    wide = {"median": 1.40, "p90": 3.0, "spread": 2.8, "windows": 4}  # rough windows widen the uncertainty
    rough = write_report(sweep(tmp_path / "rough", metrics(20_000.0, step_time_ms=wide),
                               metrics(26_000.0, step_time_ms=wide)))
    assert rough.best is None and "±68.9 %" in (tmp_path / "rough" / "report.md").read_text()


def test_one_run_per_job_ranked_by_the_primary_metric_names_its_best_metric(tmp_path):
    # its metric picked the leader, not its samples/s: a slower job with the better metric is still named
    from fastpipe.report.sweep_folder import SweepSpec

    folder = sweep(tmp_path, metrics(300.0, primary_metric={"name": "accuracy", "value": 0.80, "higher_is_better": True}),
                   metrics(100.0, primary_metric={"name": "accuracy", "value": 0.90, "higher_is_better": True}))
    result = write_report(folder, SweepSpec(task_overrides=list(TASK), objective="primary_metric"))
    assert result.best["job"] == 1 and result.confidence.kind == "metric"
    assert "ranked by the held-out metric, untested against run-to-run noise" in (folder / "report.md").read_text()


def test_repeats_spread_wider_than_max_spread_are_unstable_and_crown_nobody(tmp_path, capsys):
    folder = sweep(tmp_path, repeated(21_296.0, 10_000.0, 36_000.0), repeated(8_806.2, 3_000.0, 31_000.0))
    result = write_report(folder)
    md = (folder / "report.md").read_text()
    assert result.best is None and result.confidence.kind == "unstable" and result.candidate["job"] == 0
    assert "UNSTABLE: job 0's 3 repeats spread 122 %" in md and "21,296.0 (10,000.0-36,000.0, n=3) UNSTABLE" in md
    assert not (folder / "best.yaml").exists()
    alone = write_report(sweep(tmp_path / "alone", repeated(2_800.0, 2_600.0, 3_150.0), repeated(2_100.0, 2_000.0, 2_500.0)))
    assert alone.confidence.kind == "unstable" and alone.confidence.tie == []  # no "(tie)" without a job it overlaps
    assert "(tie)" not in (tmp_path / "alone" / "report.md").read_text()
    assert report_main([str(folder), "--quiet", "--save-best", str(tmp_path / "w.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fastpipe.report: error: --save-best: no winner to save: job 0's repeated throughputs spread")
    assert "--force writes job 0" in err and err.count("\n") == 1
    assert report_main([str(folder), "--quiet", "--save-best", str(tmp_path / "w.yaml"), "--force"]) == 0
    assert "NOT A SEPARATED WINNER (written with --force): noise: UNSTABLE" in (tmp_path / "w.yaml").read_text()


def test_overlapping_repeats_are_a_tie_and_separated_ones_a_winner(tmp_path):
    tie = write_report(sweep(tmp_path / "tie", repeated(1_000.0, 980.0, 1_020.0), repeated(1_010.0, 1_000.0, 1_030.0)))
    md = (tmp_path / "tie" / "report.md").read_text()
    assert tie.best is None and tie.confidence.tie == [1, 0] and "- tie: jobs 1, 0: their repeats overlap" in md
    assert "1.01x (within noise)" in md
    apart = write_report(sweep(tmp_path / "apart", repeated(1_000.0, 980.0, 1_020.0), repeated(1_200.0, 1_190.0, 1_210.0)))
    assert apart.best["job"] == 1 and apart.confidence.kind == "separated"
    assert "lie above every other job's: the winner is separated" in (tmp_path / "apart" / "report.md").read_text()


def test_max_spread_is_a_setting(tmp_path):
    folder = sweep(tmp_path, repeated(1_000.0, 900.0, 1_100.0), repeated(2_000.0, 1_900.0, 2_100.0))
    assert write_report(folder).confidence.kind == "separated"  # 10 % spreads: within the default 0.10
    assert report_main([str(folder), "--quiet", "--max-spread", "0.05"]) == 0
    assert "UNSTABLE" in (folder / "report.md").read_text()
    assert report_main([str(folder), "--quiet", "--max-spread", "0"]) == 2


def test_a_job_without_rivals_is_not_held_back_by_its_spread(tmp_path):
    folder = sweep(tmp_path, repeated(21_296.0, 10_000.0, 36_000.0), metrics(None, status="failed"))
    result = write_report(folder)
    md = (folder / "report.md").read_text()
    assert result.best["job"] == 0 and "is the only job that could win" in md
    assert "UNSTABLE" in md  # its row still says so, and the header: crowned as the only choice, not for its speed
    assert "(crowned whatever its spread; its own 3 repeats spread 122 %" in md
    assert "- unstable: job 0 (122 %): repeats spread" in md and "# unstable: job 0 (122 %)" in (folder / "best.yaml").read_text()


def header(md: str) -> str:
    return md.split("\n|", 1)[0]


def test_the_header_names_every_unstable_job_not_only_the_leader(tmp_path):
    steady_leader = make_sweep(tmp_path / "a", [(("seed=0",), repeated(1_000.0, 990.0, 1_010.0)),
                                                (("seed=1",), repeated(900.0, 500.0, 1_300.0)),
                                                (("seed=2",), repeated(2_000.0, 1_990.0, 2_010.0))], task=("seed=0,1,2",))
    result = write_report(steady_leader)
    md = (steady_leader / "report.md").read_text()
    assert result.best["job"] == 2 and result.confidence.kind == "separated" and result.confidence.unstable == [1]
    assert "- unstable: job 1 (89 %): repeats spread (max - min over the median) more than report.max_spread=0.1" \
        in header(md)
    assert "| 900.0 (500.0-1,300.0, n=3) UNSTABLE |" in md  # and its row
    both = write_report(sweep(tmp_path / "b", repeated(21_296.0, 10_000.0, 36_000.0), repeated(8_806.2, 3_000.0, 31_000.0)))
    lines = [x for x in header((tmp_path / "b" / "report.md").read_text()).splitlines() if x.startswith("- unstable:")]
    assert both.confidence.kind == "unstable" and lines == [lines[0]] and lines[0].startswith(
        "- unstable: jobs 0 (122 %), 1 (318 %): ")  # one line, every unstable job
