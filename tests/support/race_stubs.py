"""Races of stub jobs: a launcher that writes each round's metrics.json from a given time per (job, seed)
without training, for the in-process tests of the race and its report (tests/unit/sweeps, report)."""
from __future__ import annotations

from fastpipe.record import results
from fastpipe.record.run_record import RunRecord
from fastpipe.sweeps.race.rounds import RaceSettings
from fastpipe.sweeps.race.run import new_record, run_race


def stub_record(seconds, reached, stopped_by):
    return RunRecord(status="ok", throughput=100.0, stopped_by=stopped_by,
                     primary_metric={"name": "accuracy", "value": 0.9 if reached else 0.5, "higher_is_better": True},
                     target={"value": 0.9, "metric": "accuracy", "reached": reached, "seconds": seconds,
                             "seconds_end_to_end": seconds + 2.0, "steps": 10, "samples": 160,
                             "best_value": 0.9 if reached else 0.5, "higher_is_better": True})


class StubLaunch:
    """A launcher that 'trains' job N of round K for ``times(n, seed)`` seconds (None: it never reaches the
    target, ending at 50 s), obeying the round's cap; ``failing``: (job, seed) pairs that fail. ``late``: a run
    stopped by the cap before its time still reaches the target in the evaluation that ends it, 0.5 s past
    the cap (as fastpipe/train/loop.py records it: stopped by the target)."""

    def __init__(self, sweep_dir, times, failing=(), stop_in_round=None, extra=None, late=False, clock=None):
        self.sweep_dir, self.times, self.failing, self.stop_in_round = sweep_dir, times, set(failing), stop_in_round
        self.late, self.clock = late, clock  # clock: a WallClock each run advances by the seconds it trained
        self.extra = extra or (lambda num: {})  # more of job N's record (its lr_search, ...)
        self.trained = []  # (job, seed) of every run that trained (not skipped as finished)
        self.overrides = []  # every run's overrides
        self.searched = 0  # launches of the race's range test

    def __call__(self, batch, stage):
        for overrides in batch:
            values = dict(o.split("=", 1) for o in overrides)
            if values["hydra.sweep.subdir"] == "lr-search":  # the race's one range test (shared_lr.py)
                self.searched += 1
                if results.read(self.sweep_dir / "lr-search") is None:
                    (self.sweep_dir / "lr-search").mkdir(parents=True)
                    results.write(self.sweep_dir / "lr-search", RunRecord(status="ok", lr_search={"suggestion": 0.002}))
                continue
            folder, seed = values["hydra.sweep.subdir"], int(values["seed"])
            num, round_no = int(folder.split("/")[0]), int(folder.split("-")[-1])
            if self.stop_in_round == round_no:
                raise SystemExit(75)
            if results.read(self.sweep_dir / folder) is not None:  # sweep.resume: finished earlier, skipped
                continue
            self.trained.append((num, seed))
            self.overrides.append(overrides)
            cap = float(values.get("train.time_budget_s", "inf"))
            seconds = self.times(num, seed)
            if (num, seed) in self.failing:
                record = RunRecord(status="failed", reason="CUDA out of memory")
            elif seconds is not None and seconds <= cap:
                record = stub_record(seconds, True, "target")
            elif seconds is not None and self.late:
                record = stub_record(cap + 0.5, True, "target")
            else:
                record = stub_record(min(cap, 50.0), False, "time_budget" if cap < 50.0 else None)
            if self.clock is not None:
                self.clock.now += record.target["seconds"] if record.target else 1.0
            (self.sweep_dir / folder).mkdir(parents=True)
            results.write(self.sweep_dir / folder, record.set(**self.extra(num)))


class WallClock:
    """``time`` for fastpipe/sweeps/race/run.py (monkeypatched in): seconds pass only as the stub runs train,
    one after another, so a race's wall time (``max_wall_s``) is known in advance."""

    def __init__(self, now=1000.0):
        self.now = now

    def time(self):
        return self.now


def race(tmp_path, times, n=4, failing=(), earlier=None, stop_in_round=None, combos=None, extra=None, late=False,
         clock=None, sharing=(), **settings):
    """Race ``n`` stub configurations (``optimizer.lr=j``, or ``combos``) into ``tmp_path``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    launch = StubLaunch(tmp_path, times, failing, stop_in_round, extra, late, clock)
    combos = combos or [[f"optimizer.lr={j}"] for j in range(n)]
    record = new_record(combos, 0, 0, RaceSettings(**settings), "training", 1)
    return run_race(launch, record, RaceSettings(**settings), tmp_path, "training", earlier=earlier,
                    sharing=sharing), launch


def noisy(base, spread=1.0):
    """A time around ``base`` that depends on the seed alone (the same noise for every seed's jobs)."""
    return lambda seed: base + spread * ((seed * 7919) % 13) / 13.0
