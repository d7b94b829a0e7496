"""hydra/sweeper=autotune's logic (issue 56): the probe's classification on recorded runs, the candidates
for each bound, and the climb over stub jobs (each a metrics.json written by a fake launcher: no training)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastpipe.errors import ConfigError
from fastpipe.record.results import write_json_atomic
from fastpipe.sweeps.autotune import bounds, candidates
from fastpipe.sweeps.autotune.bounds import classify
from fastpipe.sweeps.autotune.candidates import catalogue, propose
from fastpipe.sweeps.autotune.climb import AutotuneSettings, Climb, compare, with_change

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"
JPEG = RESULTS / "jpeg-pipeline" / "h200-2026-11-30-bf26fbd"


def _recorded(path: Path) -> dict:
    return json.loads((path / "metrics.json").read_text())


def test_recorded_gpu_runs_are_classified_by_what_bounded_them():
    loader = _recorded(JPEG / "phase4" / "s4-ladder" / "0")  # ResNet-50, data=default: 14 % waiting for batches
    assert classify(loader).bound == "data" and "data-wait 14%" in classify(loader).describe()
    dali = _recorded(JPEG / "phase4" / "s4-dali" / "1")  # data=dali at 6,351 samples/s: 23 % waiting
    assert classify(dali).bound == "data"
    idle = _recorded(JPEG / "phase3" / "s3-sweep" / "0")  # mmap, amp, compiled: batches on time, the GPU 73 % busy
    assert classify(idle).bound == "host"
    busy = dict(idle, gpu_util=96.0)
    assert classify(busy).bound == "compute"
    assert classify(dict(idle, host_frac=0.3)).bound == "compute"  # the thread waits on the GPU: not the host


def test_headroom_needs_the_devices_memory_and_is_never_read_from_a_cpus_rss():
    run = dict(_recorded(JPEG / "phase3" / "s3-sweep" / "0"), peak_mem_gb=11.1)
    assert not classify(run).headroom  # recorded before env.device_mem_gb
    run["env"] = dict(run["env"], device_mem_gb=139.8)
    assert classify(run).headroom and "memory 11.1 of 140 GB" in classify(run).describe()
    assert not classify(dict(run, peak_mem_gb=90.0)).headroom
    cpu = {"data_wait_frac": 0.02, "peak_mem_gb": 1.0, "peak_mem_kind": "rss", "env": {"device": "cpu"}}
    assert classify(cpu).bound == "compute" and not classify(cpu).headroom


def _names(found):
    return [c.override for c in found]


def test_each_bound_gets_what_relieves_it_best_expected_first():
    everything = catalogue("cpu")
    current = {"data": "default", "compile": "off", "precision": "fp32", "train.batch_size": "64",
               "data.num_workers": "0", "runtime.channels_last": "auto"}
    data = _names(propose("data", False, current, everything))
    assert data[0] == "data=mmap" and "data.num_workers=auto" in data and "compile=default" not in data
    host = _names(propose("host", False, current, everything))
    assert host[:1] == ["compile=default"] and "train.batch_size=auto" in host
    compute = _names(propose("compute", False, current, everything))
    assert "precision=amp" in compute and "runtime.channels_last=true" in compute and "data=mmap" not in compute
    assert "data=dali" not in _names(everything) or candidates.choice("data", "dali").requires.installed()
    roomy = _names(propose("compute", True, current, everything))
    assert roomy[-1] == "train.batch_size=auto"  # memory headroom: the batch after the bound's own


def test_fixed_keys_the_current_value_tried_changes_and_keys_of_another_loader_are_left_out():
    everything = catalogue("cpu")
    current = {"data": "mmap", "compile": "off", "precision": "fp32", "data.decode_workers": "auto"}
    names = _names(propose("data", False, current, everything))
    assert "data=mmap" not in names and "data.decode_workers=auto" not in names and "data.num_workers=auto" not in names
    assert "compile" not in " ".join(_names(propose("host", False, current, everything, fixed=["compile"])))
    assert "compile=default" not in _names(propose("host", False, current, everything, tried=["compile=default"]))


def test_the_space_limits_a_key_to_its_values_and_adds_keys():
    found = catalogue("cpu", {"compile": "max-autotune", "train.grad_accum": "2,4"})
    assert [c.value for c in found if c.key == "compile"] == ["max-autotune"]
    assert {c.value for c in found if c.key == "train.grad_accum"} == {"2", "4"}
    assert all(c.relieves == bounds.BOUNDS for c in found if c.key == "train.grad_accum")
    with pytest.raises(ConfigError, match="compile=fastest is not a registered choice"):
        catalogue("cpu", {"compile": "fastest"})


def test_a_change_replaces_the_same_keys_override():
    assert with_change(["data=default", "+model.width=8", "seed=1"], "data=mmap") == ["+model.width=8", "seed=1",
                                                                                         "data=mmap"]


def _metrics(runs, accuracy=0.9, wait=0.0, util=None):
    return {"status": "ok", "throughput": sorted(runs)[len(runs) // 2], "repeats": {"throughput": runs},
            "data_wait_frac": wait, "gpu_util": util, "env": {"device": "cpu"},
            "primary_metric": {"name": "accuracy", "value": accuracy, "higher_is_better": True},
            "step_time_ms": {"median": 10.0, "spread": 0.5, "windows": 8}}


def test_a_candidate_wins_only_when_its_runs_all_beat_the_current_best():
    assert compare(_metrics([120, 121, 122]), _metrics([100, 101, 102]))["result"] == "won"
    lost = compare(_metrics([101, 130, 131]), _metrics([100, 102, 103]))
    assert lost["result"] == "lost" and "do not all beat" in lost["evidence"]["text"]
    one = compare(_metrics([105]), _metrics([100]))  # 5 % with one run each: within twice the 4 % floor
    assert one["result"] == "lost" and "within twice the noise" in one["evidence"]["text"]
    assert compare(_metrics([130]), _metrics([100]))["result"] == "won"


# Each stub job's throughput by the changes its overrides make: data=mmap and compile=default help, amp
# breaks the held-out metric, channels_last fails.
def _stub_launch(sweep_dir: Path, launched: list):
    def launch(batch, stage):
        for overrides in batch:
            launched.append(list(overrides))
            sub = next(o.split("=", 1)[1] for o in overrides if o.startswith("hydra.sweep.subdir="))
            speed, wait, accuracy = 100.0, 0.3, 0.9
            if "data=mmap" in overrides:
                speed, wait = speed * 2, 0.01
            if "compile=default" in overrides:
                speed *= 1.5
            if "precision=amp" in overrides:
                speed, accuracy = speed * 3, 0.5
            record = _metrics([speed * f for f in (0.99, 1.0, 1.01)], accuracy, wait)
            if "runtime.channels_last=true" in overrides:
                record = {"status": "failed", "reason": "stub: channels_last broke"}
            (sweep_dir / sub).mkdir(parents=True, exist_ok=True)
            write_json_atomic(sweep_dir / sub / "metrics.json", record)
    return launch


def _values(overrides, keys):
    chosen = {"data": "default", "compile": "off", "precision": "fp32", "train.batch_size": "64",
              "data.num_workers": "2", "data.decode_workers": "auto", "runtime.channels_last": "auto"}
    for o in overrides:
        key, _, value = o.partition("=")
        chosen[key] = value
    return {key: chosen.get(key, "None") for key in keys}


def test_the_climb_keeps_what_wins_probes_again_and_stops_when_nothing_wins(tmp_path):
    launched = []
    space = {"data": "default,mmap", "compile": "default", "precision": "amp", "runtime.channels_last": "true",
             "data.num_workers": "auto", "train.batch_size": "auto"}
    climb = Climb(["seed=1"], "throughput", AutotuneSettings(repeats=3, space=space, fixed=["train.batch_size"]),
                  tmp_path, _stub_launch(tmp_path, launched), _values)
    record = climb.run()
    assert record["final"]["overrides"] == ["seed=1", "data=mmap", "compile=default"]
    assert record["stopped_by"] == "no_candidate_won"
    first, second, last = record["steps"]
    assert first["probe"]["bound"] == "data" and first["kept"] == "data=mmap"
    assert second["probe"]["bound"] == "compute" and second["kept"] == "compile=default"
    assert [c["change"] for c in second["candidates"]] == ["precision=amp", "runtime.channels_last=true",
                                                           "compile=default"]  # made for compute first
    assert last["candidates"] == [] and last["kept"] is None  # amp and channels_last are not tried again
    results = {c["change"]: c["result"] for s in record["steps"] for c in s["candidates"]}
    assert results["precision=amp"] == "parity" and results["runtime.channels_last=true"] == "failed"
    assert record["speedup"]["value"] == pytest.approx(3.0) and record["speedup"]["low"] < 3.0 < record["speedup"]["high"]
    assert all("report.repeats=3" in o for o in launched) and not any("train.batch_size=auto" in o for o in launched)
    assert json.loads((tmp_path / "autotune.json").read_text()) == json.loads(json.dumps(record))


def test_a_resumed_climb_reads_its_finished_jobs_back_and_decides_the_same(tmp_path):
    launched = []
    settings = AutotuneSettings(repeats=3, space={"data": "mmap", "compile": "default"})
    first = Climb([], "throughput", settings, tmp_path, _stub_launch(tmp_path, launched), _values).run()
    again = Climb([], "throughput", settings, tmp_path, _stub_launch(tmp_path, launched), _values).run()
    assert again["final"] == first["final"] and again["steps"] == first["steps"]


def test_the_budget_stops_the_climb_and_says_so(tmp_path):
    climb = Climb([], "throughput", AutotuneSettings(repeats=3, max_trials=2, space={"data": "mmap", "compile": "default"}),
                  tmp_path, _stub_launch(tmp_path, []), _values)
    record = climb.run()
    assert record["stopped_by"] == "max_trials" and len(climb.trials) == 2
    with pytest.raises(ConfigError, match="hydra.sweeper.repeats=0 must be >= 1"):
        AutotuneSettings(repeats=0).check()


def _target_launch(sweep_dir: Path):
    """Stub jobs by time to target: compile=default reaches it in 6 s, anything else in 10 s (each seed a little
    apart, so a race of the two sends the slower out)."""
    def launch(batch, stage):
        for overrides in batch:
            sub = next(o.split("=", 1)[1] for o in overrides if o.startswith("hydra.sweep.subdir="))
            seed = int(next((o.split("=", 1)[1] for o in overrides if o.startswith("seed=")), "0"))
            seconds = (6.0 if "compile=default" in overrides else 10.0) + 0.01 * seed
            record = dict(_metrics([100.0], wait=0.0), target={"reached": True, "seconds": seconds,
                                                               "seconds_end_to_end": seconds + 1})
            (sweep_dir / sub).mkdir(parents=True, exist_ok=True)
            write_json_atomic(sweep_dir / sub / "metrics.json", record)
    return launch


def test_by_time_to_target_each_candidate_is_raced_against_the_current_best(tmp_path):
    settings = AutotuneSettings(space={"compile": "default,max-autotune"}, fixed=["precision", "data",
                                "runtime.channels_last", "train.batch_size", "data.num_workers"])
    record = Climb(["seed=3"], "time_to_target", settings, tmp_path, _target_launch(tmp_path), _values,
                   seed=3).run()
    first = record["steps"][0]
    assert first["candidates"][0]["change"] == "compile=default" and first["candidates"][0]["result"] == "won"
    assert first["candidates"][0]["evidence"]["rounds"] == 6  # the fewest seeds a race of two can decide in
    assert (tmp_path / "race-0" / "race.json").is_file() and not (tmp_path / "race.json").exists()
    assert record["final"]["overrides"] == ["seed=3", "compile=default"]
    assert record["speedup"]["value"] == pytest.approx(10.03 / 6.0, rel=0.01)
    later = [c["change"] for s in record["steps"][1:] for c in s["candidates"]]
    assert later == ["compile=max-autotune"] and record["steps"][1]["kept"] is None  # raced from the new best: lost
    assert record["stopped_by"] == "no_candidate_won"


def test_headroom_adds_only_the_changes_made_for_memory_and_a_run_without_windows_is_described():
    everything = catalogue("cpu")
    current = {"data": "default", "compile": "off", "precision": "fp32", "train.batch_size": "64",
               "data.num_workers": "0", "runtime.channels_last": "auto"}
    roomy = _names(propose("data", True, current, everything))
    assert roomy[-1] == "train.batch_size=auto" and "precision=amp" not in roomy  # amp saves memory: not for it
    assert classify({"data_wait_frac": None, "env": {"device": "cpu"}}).describe() == "compute (CPU run, data-wait 0%)"


def test_settings_are_checked_before_any_job():
    with pytest.raises(ConfigError, match="hydra.sweeper.race: rounds is not a setting of the race; use min_rounds"):
        AutotuneSettings(race={"rounds": 5}).check("time_to_target")
    with pytest.raises(ConfigError, match="hydra.sweeper.max_rounds=2 must be >= hydra.sweeper.min_rounds|cannot send"):
        AutotuneSettings(race={"max_rounds": 2}).check("time_to_target")
    with pytest.raises(ConfigError, match="precision=fp4 is not a registered choice"):
        AutotuneSettings(space={"precision": "fp4"}).check()


def test_a_failed_baseline_stops_the_climb_and_the_report_crowns_nothing(tmp_path):
    from fastpipe.report.confidence import autotuned

    def launch(batch, stage):
        for overrides in batch:
            sub = next(o.split("=", 1)[1] for o in overrides if o.startswith("hydra.sweep.subdir="))
            (tmp_path / sub).mkdir(parents=True, exist_ok=True)
            write_json_atomic(tmp_path / sub / "metrics.json", {"status": "failed", "reason": "stub: broken"})

    record = Climb([], "throughput", AutotuneSettings(), tmp_path, launch, _values).run()
    assert record["stopped_by"] == "baseline_failed" and record["speedup"] is None and record["steps"] == []
    verdict = autotuned(record)
    assert not verdict.crowns and "nothing to climb from" in verdict.lines[-1]
    unfinished = dict(record, stopped_by=None, steps=[], final={"trial": 0, "overrides": []})
    assert not autotuned(unfinished).crowns and "best so far: job 0" in autotuned(unfinished).lines[-1]


def test_a_change_that_leads_back_to_a_configuration_already_run_is_not_tried(tmp_path):
    launched = []
    space = {"compile": "default,max-autotune"}  # both relieve compute: a win of one must not bring back the other
    climb = Climb([], "throughput", AutotuneSettings(space=space, fixed=["precision", "runtime.channels_last"]),
                  tmp_path, _stub_launch(tmp_path, launched), _values)
    record = climb.run()
    runs = [tuple(sorted(t["overrides"])) for t in record["trials"]]
    assert len(runs) == len(set(runs))  # no configuration ran twice
