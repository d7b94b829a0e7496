"""The report of a race: one row per configuration (never per round), each one's seeds and outcome, the
winner or the tie set, and --save-best's refusal of a tie (issue 31 item 2)."""
from __future__ import annotations

from omegaconf import OmegaConf

from fastpipe.report.__main__ import main as report_main
from fastpipe.report.sweep_folder import SweepSpec
from fastpipe.report.publish import write_report
from race_stubs import noisy, race

SPEC = SweepSpec(task_overrides=["optimizer.lr=0,1,2,3"], objective="time_to_target")


def test_a_tie_is_reported_as_one_row_per_job_and_save_best_refuses_it(tmp_path, capsys):
    close = noisy(10.0)
    race(tmp_path, lambda n, seed: None if n >= 2 else close(seed) + (0.3 if (n + seed) % 2 else 0.0))
    OmegaConf.save({"hydra": {"overrides": {"task": SPEC.task_overrides}}, "report": {"objective": "time_to_target"}},
                   tmp_path / "multirun.yaml")
    result = write_report(tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert [r["job"] for r in result.rows][:2] in ([0, 1], [1, 0]) and len(result.rows) == 4
    assert result.best is None and sorted(result.confidence.tie) == [0, 1]
    assert "- race: 4 configurations over seeds 0..9 (tests from the 8th seed, at most 10 seeds; alpha 0.05 over the " \
           "whole race: two-sided sign test of each pair's seeds" in md and "stopped: max rounds" in md
    assert "sent out: job 2 after round 7 (by job 0, p = 0.0078)" in md and "- cost: 36 runs against 40 for every job" in md
    assert "- tie: jobs 0, 1 (10 seeds; max_rounds reached)" in md or "- tie: jobs 1, 0 (10 seeds; max_rounds reached)" in md
    assert "Next: race them as a new race" in md and "--save-best PATH --force" in md  # a tie says what to do next
    assert "| tie, 10 seeds |" in md and "| out after round 7 (by job 0, p = 0.0078), 8 seeds |" in md
    # the hopeless pair's row says it missed every run; the caps from round 3 on say what they cost
    assert "> 21.1 (best 50.0 %; 8 of 8 missed)" in md and "- caps: 10 run(s) stopped at their round's cap" in md
    assert report_main([str(tmp_path), "--quiet", "--save-best", str(tmp_path / "w.yaml")]) == 2
    assert "--save-best: no winner to save: jobs " in capsys.readouterr().err
    assert report_main([str(tmp_path), "--quiet", "--save-best", str(tmp_path / "w.yaml"), "--force"]) == 0
    assert "NOT A SEPARATED WINNER (written with --force): tie: jobs" in (tmp_path / "w.yaml").read_text()
    assert "| tie, 10 seeds |" in (tmp_path / "report.md").read_text()  # the CLI read the sweep's own objective


def test_a_separated_winner_is_named_and_saved(tmp_path):
    race(tmp_path, lambda n, seed: noisy(10.0)(seed) + 3.0 * n, n=2)
    result = write_report(tmp_path, SweepSpec(task_overrides=["optimizer.lr=0,1"], objective="time_to_target"))
    md = (tmp_path / "report.md").read_text()
    assert result.best["job"] == 0 and "- winner: job 0: every other job was sent out by a two-sided sign test of its " \
                                       "paired seeds (alpha 0.05 over the whole race: 1 pair(s), a look after every " \
                                       "seed up to 10), after 6 seeds" in md
    assert "| 0 (best) (baseline) |" not in md and (tmp_path / "best.yaml").is_file()
    time = result.best["time_to_target_s"]
    assert result.best["target_min"] <= time <= result.best["target_max"] and result.best["target_repeats"] == 6


def test_the_last_standing_is_named_so_and_nothing_is_saved_without_force(tmp_path, capsys):
    # issue 54: a rival that failed once left the survivor "separated after 2 seeds", with no test, and best.yaml
    race(tmp_path, lambda n, seed: 10.0 + n, n=2, failing=[(1, 1)])
    result = write_report(tmp_path, SweepSpec(task_overrides=["optimizer.lr=0,1"], objective="time_to_target"))
    md = (tmp_path / "report.md").read_text()
    assert result.best is None and result.candidate["job"] == 0 and result.confidence.kind == "last_standing"
    assert "- last standing: job 0, after 2 seeds: the others failed (job 1 in round 1)" in md and "separated" not in md
    assert "| last standing, 2 seeds |" in md and "(tie)" not in md and not (tmp_path / "best.yaml").exists()
    assert report_main([str(tmp_path), "--quiet", "--save-best", str(tmp_path / "w.yaml")]) == 2
    assert "job 0 is the last standing, never tested against the job(s) that failed" in capsys.readouterr().err
    assert report_main([str(tmp_path), "--quiet", "--save-best", str(tmp_path / "w.yaml"), "--force"]) == 0


def test_a_race_an_earlier_fastpipe_decided_is_reported_with_a_note(tmp_path):
    import json

    race(tmp_path, lambda n, seed: noisy(10.0)(seed) + 3.0 * n, n=2)
    record = json.loads((tmp_path / "race.json").read_text())
    record = {k: v for k, v in record.items() if k not in ("schema_version", "last_standing", "lr_search")}
    for e in record["eliminated"].values():
        e.pop("by")  # an earlier race did not record who sent a job out
    (tmp_path / "race.json").write_text(json.dumps(dict(record, version=2)))
    result = write_report(tmp_path)  # no multirun.yaml: race.json says it ranks by time to target
    md = (tmp_path / "report.md").read_text()
    assert result.best["job"] == 0 and "an earlier fastpipe decided this race with other tests" in md
    assert "sent out: job 1 after round 5 (p = 0.031)" in md and "by job None" not in md


def test_a_damaged_race_json_is_one_line_and_writes_nothing(tmp_path, capsys):
    # issue 54: a damaged race.json was reported as a 10-job grid of single runs and overwrote best.yaml
    race(tmp_path, lambda n, seed: noisy(10.0)(seed) + 3.0 * n, n=2)
    write_report(tmp_path, SweepSpec(task_overrides=["optimizer.lr=0,1"], objective="time_to_target"))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file() and p.name != "race.json"}
    (tmp_path / "race.json").write_text('{"schema_version": 3, "rounds": ')
    assert report_main([str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "race.json is damaged: unreadable" in err and "sweep.resume=true" in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file() and p.name != "race.json"} == before


CANDIDATES = ["given", "auto_third", "auto", "auto_triple"]  # +sweep=lr's lr_candidate group, the given rate first
FACTORS = {"auto_third": 0.3, "auto": 1.0, "auto_triple": 3.0}


def lr_race(tmp_path, times):
    """A +sweep=lr race of stub jobs (the range test suggested 0.002; job 0 the project's given rate)."""
    def search(num):  # the auto jobs' lr_search: the same suggestion, each its own factor
        factor = FACTORS.get(CANDIDATES[num])
        return {} if factor is None else {"lr_search": {"rule": "valley", "suggestion": 0.002, "factor": factor}}

    race(tmp_path, times, n=4, extra=search, combos=[[f"+lr_candidate={c}"] for c in CANDIDATES], max_rounds=12)
    result = write_report(tmp_path, SweepSpec(task_overrides=[f"+lr_candidate={','.join(CANDIDATES)}"],
                                              objective="time_to_target"))
    return result, (tmp_path / "report.md").read_text()


def test_the_lr_race_says_whether_the_range_tests_suggestion_won(tmp_path):
    result, md = lr_race(tmp_path, lambda n, seed: noisy(10.0)(seed) + (0.0 if n == 3 else 3.0 + n))
    assert result.best["job"] == 3 and "| lr (found) |" in md and "| 0.006 |" in md
    assert "- learning rate: 3x the suggestion (0.006) won, median 10." in md
    assert "commit optimizer.lr=0.006 (or +lr_candidate=auto_triple)" in md


def test_the_lr_race_says_the_range_tests_suggestion_won_against_each_candidate(tmp_path):
    result, md = lr_race(tmp_path, lambda n, seed: noisy(10.0)(seed) + (0.0 if n == 2 else 3.0 + n))
    assert result.best["job"] == 2 and "- winner: job 2: every other job was sent out" in md
    line = next(x for x in md.splitlines() if x.startswith("- learning rate:"))
    assert line.startswith("- learning rate: the range test's suggestion (valley, 0.002) won: median 10.3 s, 1.29x "
                           "sooner than the next (the given rate); the given rate median 13.3 s (out after round 8, by "
                           "job 2, p = 0.0039); 0.3x median 14.3 s (out after round 8, by job 0, p = 0.0039)")
    assert line.endswith(": commit optimizer.lr=0.002 (or +lr_candidate=auto)")


def test_the_lr_race_says_the_range_tests_suggestion_tied_and_with_which_candidate(tmp_path):
    close = noisy(10.0)
    result, md = lr_race(tmp_path, lambda n, seed: None if n in (0, 1) else close(seed) + (0.3 if (n + seed) % 2 else 0.0))
    assert result.best is None and sorted(result.confidence.tie) == [2, 3]
    # "either rate" is said of the tie; the candidates that left the race come after it
    line = next(x for x in md.splitlines() if x.startswith("- learning rate:"))
    assert line == ("- learning rate: the range test's suggestion (valley, 0.002) tied with 3x: median 10.6 s; 3x median "
                    "10.6 s: either rate; the given rate missed the target in 9 of 9 runs (out after round 8, by job 2, "
                    "p = 0.0039); 0.3x missed the target in 9 of 9 runs (out after round 8, by job 2, p = 0.0039)")


def test_ordinals_read_as_words_do():
    from fastpipe.report.formats import ordinal

    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "101st", "111th"]
