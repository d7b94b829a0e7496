"""hydra/sweeper=race: its statistics on given per-seed times, and whole races of stub jobs (issue 31)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fastpipe.record import results
from fastpipe.sweeps.race import run, stats
from fastpipe.sweeps.race.rounds import RaceSettings, median_time, read
from race_stubs import WallClock, noisy, race

INF = math.inf


def test_the_sign_test_is_exact_and_two_sided():
    assert stats.sign_p(6, 6) == stats.sign_p(0, 6) == 2 / 64
    assert stats.sign_p(5, 6) == pytest.approx(2 * 7 / 64) and stats.sign_p(0, 0) == 1.0
    won = stats.wins_matrix({0: [1, 2, INF, INF, 5], 1: [2, 1, INF, 3, 5]})  # two misses, equal times: no one's
    assert (won[0, 1], won[1, 0]) == (1, 2)


def test_the_crossing_chance_of_the_sequential_test_is_exact():
    # every path of a fair sign walk of 10 steps, enumerated: the dynamic program's number is the share
    import itertools

    level = 0.03125
    crossed = sum(any(stats.sign_p(sum(path[:n]), n) <= level for n in range(1, 11))
                  for path in itertools.product((0, 1), repeat=10))
    assert stats.crossing(level, 10) == pytest.approx(crossed / 2 ** 10)


@pytest.mark.parametrize("configurations, max_rounds, fewest", [(2, 10, 6), (4, 10, 8), (7, 10, 10), (8, 10, None),
                                                                (8, 15, 11)])
def test_the_level_holds_the_alpha_over_every_look_and_pair(configurations, max_rounds, fewest):
    pairs = stats.pairs_of(configurations)
    level = stats.level(0.05, pairs, max_rounds)
    assert stats.crossing(level, max_rounds) <= 0.05 / pairs
    assert stats.fewest_seeds(0.05, pairs, max_rounds) == fewest


def test_a_close_pair_is_judged_on_its_own_seeds_beside_jobs_that_never_reach_the_target():
    # race-0 of benchmarks/results/race/cpu-2026-12-03-024e33d: job 1 led job 0 in four seeds of five.
    # Conover's test pooled with two jobs that never reached the target sent job 0 out (p = 0.023); a
    # pair's own seeds cannot: 4 of 5 is no evidence
    times = {0: [3.74, 6.32, 2.96, 5.17, 6.61], 1: [3.73, 5.87, 5.31, 4.88, 5.23], 2: [INF] * 5, 3: [INF] * 5}
    verdict = stats.judge(times, alpha=0.05, entrants=4, seeds=5, sequential=False)
    assert verdict.out == {} and verdict.pairs["0-1"] == {"wins": 1, "losses": 4, "p": 0.375}
    longer = {j: v * 2 for j, v in times.items()}  # ten seeds: the hopeless pair loses every one
    verdict = stats.judge(longer, alpha=0.05, entrants=4, seeds=10)
    assert sorted(verdict.out) == [2, 3] and verdict.out[2]["p"] == 2 / 1024


def test_runs_that_agree_everywhere_are_no_evidence_of_a_difference():
    same = stats.judge({0: [INF] * 8, 1: [INF] * 8, 2: [INF] * 8}, alpha=0.05, entrants=3, seeds=10)
    assert same.out == {} and same.pairs["0-1"]["p"] == 1.0


def test_the_median_time_counts_a_miss_as_the_slowest():
    assert median_time([3.0, None, 1.0]) == 3.0 and median_time([None, None, 1.0]) is None


# ----------------------------------------------------------------------------- races of stub jobs
def test_a_race_sends_the_hopeless_pair_out_at_the_first_look_and_ties_the_close_pair(tmp_path):
    close = noisy(10.0)
    times = lambda n, seed: None if n >= 2 else close(seed) + (0.3 if (n + seed) % 2 else 0.0)  # noqa: E731
    record, launch = race(tmp_path, times)
    first = record.rounds[7]  # four configurations: eight seeds before one can be sent out
    assert first["test"] == "sign" and first["eliminated"] == [2, 3] and first["level"] == 0.0078125
    assert all(r["eliminated"] == [] and r["test"] is None for r in record.rounds[:7])
    assert {e["round"] for e in record.eliminated.values()} == {7}
    assert record.eliminated["2"]["by"] in (0, 1) and record.eliminated["2"]["p"] == 2 / 256
    assert record.stopped_by == "max_rounds" and record.winner is None and sorted(record.tie) == [0, 1]
    assert len(record.rounds) == 10 and record.rounds[8]["jobs"] == [0, 1]
    # a cap only once the leader reached the target three times (hydra.sweeper.cap_after): round 3 on
    assert [r["cap_s"] is None for r in record.rounds[:4]] == [True, True, True, False]
    assert record.rounds[3]["capped"] == [2, 3] and record.rounds[2]["capped"] == []
    combined = results.read(tmp_path / "0")
    assert combined["repeats"]["n"] == 10 and combined["repeats"]["dirs"][:2] == ["round-0", "round-1"]
    assert read(tmp_path).to_json() == record.to_json()


def test_a_round_capped_from_one_run_cannot_happen_and_a_round_every_job_missed_tells_nothing(tmp_path):
    # issue 54: round 1 capped at 2x the leader's single round-0 time; every job missed it
    times = lambda n, seed: {0: 5.0, 1: 30.0, 2: 31.0}.get(seed, 10.0 + n)  # noqa: E731
    record, _ = race(tmp_path, times, n=3, max_rounds=4, cap_after=3)
    assert [r["cap_s"] for r in record.rounds[:3]] == [None, None, None]
    record, _ = race(tmp_path / "capped", times, n=3, max_rounds=4, cap_after=1)
    assert record.rounds[1]["cap_s"] == pytest.approx(10.0) and record.rounds[1]["reached"] == []
    assert record.rounds[1]["told_nothing"] and not record.rounds[0]["told_nothing"]


def test_a_run_past_its_rounds_cap_is_a_miss_though_its_last_evaluation_reached_the_target(tmp_path):
    # a run stopped by train.time_budget_s still evaluates once more (fastpipe/train/loop.py); reaching the
    # target there, after the cap, is not reaching it in the race (issue 31: a capped run is a miss)
    record, _ = race(tmp_path, lambda n, seed: noisy(10.0)(seed) + 15.0 * n, n=2, late=True, cap_after=1)
    second = record.rounds[1]
    assert second["cap_s"] == pytest.approx(2 * noisy(10.0)(0))
    assert second["values"]["1"] is None and second["training_s"]["1"] is None
    assert second["reached"] == [0] and second["capped"] == [1]
    own = results.read(tmp_path / "1" / "round-1")  # the run's own record says what happened
    assert own["target"]["reached"] and own["target"]["seconds"] == pytest.approx(second["cap_s"] + 0.5)
    combined = results.read(tmp_path / "1")  # the configuration's rounds as the race counted them
    assert combined["target"]["repeats"]["reached"] == [True] + [False] * 5
    assert combined["target"]["reached"] is False and record.winner == 0


def test_a_clearly_faster_job_wins_after_six_seeds(tmp_path):
    record, _ = race(tmp_path, lambda n, seed: noisy(10.0)(seed) + 3.0 * n, n=2)
    assert record.winner == 0 and record.stopped_by == "winner" and len(record.rounds) == 6
    assert record.eliminated["1"]["p"] == pytest.approx(1 / 32) and record.last_standing is None


def test_a_failed_run_leaves_the_race_with_its_reason(tmp_path):
    record, launch = race(tmp_path, lambda n, seed: 10.0 + n + seed % 2, n=3, failing=[(2, 1)], max_rounds=6)
    assert record.eliminated["2"] == {"round": 1, "p": None, "reason": "failed: CUDA out of memory"}
    assert record.rounds[1]["failed"] == [2] and all(2 not in r["jobs"] for r in record.rounds[2:])
    combined = results.read(tmp_path / "2")  # the report's row: the round that failed, not a "repeat"
    assert combined["status"] == "failed" and combined["reason"] == "in round-1/: CUDA out of memory"


def test_the_one_left_when_its_rival_failed_is_the_last_standing_not_a_winner(tmp_path):
    # issue 54: a rival that failed in one round left the survivor "separated after 2 seeds", untested
    record, _ = race(tmp_path, lambda n, seed: 10.0 + n, n=2, failing=[(1, 1)])
    assert len(record.rounds) == 2 and record.winner is None and record.last_standing == 0
    assert record.stopped_by == "last_standing" and record.tie is None


def test_max_wall_s_is_checked_before_a_round_so_the_round_that_passes_it_finishes(tmp_path, monkeypatch):
    clock = WallClock()  # the stub runs train one after another: rounds of 21, 23 and 21 s
    monkeypatch.setattr(run, "time", clock)
    record, launch = race(tmp_path, lambda n, seed: 10.0 + n + seed % 2, n=2, clock=clock, max_wall_s=50.0)
    assert [r["round"] for r in record.rounds] == [0, 1, 2]  # 44 s before round 2 (it runs), 65 s after
    assert record.wall_s() == pytest.approx(65.0) and record.settings["max_wall_s"] == 50.0
    assert record.stopped_by == "max_wall_s" and record.winner is None and record.tie == [0, 1]
    assert max(seed for _, seed in launch.trained) == 2


def test_a_race_whose_every_job_failed_ends_with_no_winner_and_no_tie(tmp_path):
    record, launch = race(tmp_path, lambda n, seed: 10.0 + n, n=3, failing=[(0, 1), (1, 1), (2, 1)])
    assert len(record.rounds) == 2 and record.rounds[1]["failed"] == [0, 1, 2]
    assert record.stopped_by == "all_failed" and record.winner is None and record.tie is None
    assert record.survivors == [] and sorted(record.eliminated) == ["0", "1", "2"]
    assert all(e == {"round": 1, "p": None, "reason": "failed: CUDA out of memory"} for e in record.eliminated.values())
    assert max(seed for _, seed in launch.trained) == 1 and read(tmp_path).stopped_by == "all_failed"


def test_a_stopped_race_resumes_at_the_round_it_stopped_in_with_the_same_outcome(tmp_path):
    times = lambda n, seed: noisy(10.0)(seed) + 2.0 * n  # noqa: E731
    with pytest.raises(SystemExit):
        race(tmp_path / "a", times, n=3, stop_in_round=3)
    assert [r["round"] for r in read(tmp_path / "a").rounds] == [0, 1, 2]
    resumed, launch = race(tmp_path / "a", times, n=3, earlier=read(tmp_path / "a"))
    assert all(seed >= 3 for _, seed in launch.trained)  # rounds 0-2 finished: skipped, not trained again
    whole, _ = race(tmp_path / "b", times, n=3)
    keys = ("values", "eliminated", "leader", "cap_s")
    assert [[r[k] for k in keys] for r in resumed.rounds] == [[r[k] for k in keys] for r in whole.rounds]
    assert resumed.winner == whole.winner == 0


def test_a_finished_race_resumed_with_more_rounds_is_refused(tmp_path):
    # issue 54: raising max_rounds after a tie re-plans the looks after the data, spending the alpha again
    from fastpipe.errors import ConfigError
    from fastpipe.sweeps.race.rounds import earlier_race
    from fastpipe.sweeps.race.run import new_record

    record, _ = race(tmp_path, lambda n, seed: 10.0 + seed % 3, n=2, max_rounds=6)
    again = new_record(record.combos, 0, 0, RaceSettings(max_rounds=12), "training", 1)
    with pytest.raises(ConfigError, match=r"hydra.sweeper.max_rounds=6 \(now 12\).*new race"):
        earlier_race(tmp_path, again)
    same = new_record(record.combos, 0, 0, RaceSettings(max_rounds=6, max_wall_s=900, cap=3.0), "training", 1)
    assert earlier_race(tmp_path, same).rounds == record.rounds  # caps and max_wall_s do not plan the looks
    other_clock = new_record(record.combos, 0, 0, RaceSettings(max_rounds=6), "end_to_end", 1)
    with pytest.raises(ConfigError, match=r"report.target_clock=training \(now end_to_end\)"):
        earlier_race(tmp_path, other_clock)


def test_a_race_an_earlier_fastpipe_decided_is_reported_as_decided_and_never_resumed(tmp_path):
    from fastpipe.errors import ConfigError
    from fastpipe.sweeps.race.rounds import earlier_race
    from fastpipe.sweeps.race.run import new_record

    record, _ = race(tmp_path, lambda n, seed: 10.0 + n, n=2, max_rounds=6)
    old = {k: v for k, v in record.to_json().items() if k not in ("schema_version", "last_standing", "lr_search")}
    (tmp_path / "race.json").write_text(json.dumps(dict(old, version=2)))
    assert read(tmp_path).older and read(tmp_path).winner == 0
    with pytest.raises(ConfigError, match="an earlier fastpipe decided with other tests"):
        earlier_race(tmp_path, new_record(record.combos, 0, 0, RaceSettings(max_rounds=6), "training", 1))


def test_each_rounds_order_is_shuffled_by_its_seed_so_no_configuration_always_trains_first(tmp_path):
    # issue 54 review: a rotation ran A before B in two rounds of three; an order effect then biases the pair
    from fastpipe.sweeps.race.run import new_record, round_batch

    record = new_record([[f"optimizer.lr={j}"] for j in range(3)], 0, 0, RaceSettings(), "training", 1)
    def order(k):
        return [int(overrides[0].split("=")[1]) for overrides in round_batch(record, [0, 1, 2], k, None, [])]

    orders = [order(k) for k in range(300)]
    share = sum(o.index(0) < o.index(1) for o in orders) / len(orders)
    assert 0.4 < share < 0.6 and orders[7] == order(7)  # seeded by the round's seed: a resume runs the same order


@pytest.mark.parametrize("damage, says", [
    (lambda d: "[1, 2, 3]", "holds a JSON list"),
    (lambda d: "{", "unreadable"),
    (lambda d: json.dumps(dict(d, schema_version=9)), "schema_version 9, this fastpipe reads 3 and the older 1, 2"),
    (lambda d: json.dumps({k: v for k, v in d.items() if k != "rounds"}), "'rounds' is missing"),
    (lambda d: json.dumps(dict(d, entrants=[0, 7])), "entrants are not configurations"),
    (lambda d: json.dumps(dict(d, rounds=d["rounds"] + [dict(d["rounds"][-1], round=len(d["rounds"]))])),
     "folder of configuration 0"),
])
def test_a_damaged_race_json_is_one_line_that_names_the_fix(tmp_path, damage, says):
    from fastpipe.sweeps.race.rounds import DamagedRace

    race(tmp_path, lambda n, seed: 10.0 + n, n=2, max_rounds=3)
    path = tmp_path / "race.json"
    path.write_text(damage(json.loads(path.read_text())))
    with pytest.raises(DamagedRace, match=says) as caught:
        read(tmp_path)
    assert "\n" not in str(caught.value) and "sweep.resume=true" in str(caught.value)


def test_race_settings_are_checked():
    from fastpipe.errors import ConfigError

    with pytest.raises(ConfigError, match="max_rounds=3 must be >= hydra.sweeper.min_rounds=5"):
        RaceSettings(min_rounds=5, max_rounds=3)
    with pytest.raises(ConfigError, match="cap=0.5 must be > 1"):
        RaceSettings(cap=0.5)
    with pytest.raises(ConfigError, match="cap_after=0 must be >= 1"):
        RaceSettings(cap_after=0)
    with pytest.raises(ConfigError, match="8 configurations at alpha 0.05 cannot send any out within "
                                          "hydra.sweeper.max_rounds=10 .* at least 11"):
        RaceSettings().check(8)
    assert RaceSettings().first_look(2) == 6 and RaceSettings().first_look(4) == 8
    assert RaceSettings(min_rounds=3).first_look(4) == 3
    np.testing.assert_equal(RaceSettings(cap=None).cap, None)


def test_a_race_of_found_rates_runs_the_range_test_once_and_every_auto_job_reuses_it(tmp_path):
    # issue 54: +sweep=lr ran the range test in every job of every round (88-92 s each under load)
    from fastpipe.sweeps.race import shared_lr

    combos = [["+lr_candidate=given"]] + [[f"+lr_candidate={c}"] for c in ("auto_third", "auto", "auto_triple")]
    assert shared_lr.search_job(combos[1] + ["seed=4"]) == ["+lr_candidate=auto_third", "train.lr_find_only=true",
                                                            "hydra.sweep.subdir=lr-search"]
    record, launch = race(tmp_path, lambda n, seed: 10.0 + n, n=4, combos=combos, sharing=[1, 2, 3], max_rounds=9)
    assert launch.searched == 1 and record.lr_search == {"folder": "lr-search", "suggestion": 0.002, "jobs": [1, 2, 3]}
    reuse = f"train.lr_find_from='{(tmp_path / 'lr-search').resolve()}'"  # quoted: a comma in a path is no sweep
    runs = [o for o in launch.overrides]
    assert len(runs) == sum(len(r["jobs"]) for r in record.rounds)
    assert all((reuse in o) == ("+lr_candidate=given" not in o) for o in runs)  # the given rate races as it is
    again, launch = race(tmp_path, lambda n, seed: 10.0 + n, n=4, combos=combos, sharing=[1, 2, 3], max_rounds=9,
                         earlier=read(tmp_path))  # sweep.resume=true: the finished test is skipped by its job
    assert launch.searched == 1 and launch.trained == [] and again.lr_search == record.lr_search


def test_only_configurations_that_run_the_same_range_test_share_one():
    from conftest import compose

    from fastpipe.sweeps.race.shared_lr import sharing

    lr = ["optimizer.lr=auto", "train.lr_find_seed=0"]
    assert sharing([compose([*lr, f"optimizer.lr_auto_factor={f}", f"seed={s}"]) for f, s in ((0.3, 0), (3, 1))]) == [0, 1]
    plus_given = [compose(["train.lr_find_seed=0"])] + [compose([*lr, f"optimizer.lr_auto_factor={f}"]) for f in (1, 3)]
    assert sharing(plus_given) == [1, 2]  # the given rate races beside them, on its own
    assert not sharing([compose(["optimizer.lr=auto", f"optimizer.lr_auto_factor={f}"]) for f in (0.3, 3)])  # seed null
    assert not sharing([compose([*lr, f"train.batch_size={b}"]) for b in (16, 32)])  # another batch: another test
    assert not sharing([compose([f"optimizer.lr={r}"]) for r in (0.1, 0.3)])

