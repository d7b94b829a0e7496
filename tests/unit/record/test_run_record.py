"""The run record: one typed class, written as metrics.json by every path that ends a run."""
from __future__ import annotations

import json
import re
import signal
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from conftest import REPO, TINY, run_in_process
from fastpipe.errors import ConfigError, Preempted, TrainingError
from fastpipe.record import results
from fastpipe.record.run_record import FIELDS, KEYS, SCHEMA_VERSION, WHEN_SET_KEYS, RunRecord, failed
from fastpipe.record.summary import summary_text

HINTS = typing.get_type_hints(RunRecord)
CHOICES = {"dataset": "shapes", "precision": "amp"}
OVERRIDES = ["precision=amp", "train.max_steps=9"]


def type_errors(value, hint, where: str) -> list:
    """Where ``value`` does not have the type ``hint`` (as JSON gives it back: lists, dicts, numbers)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any:
        return []
    if origin is typing.Union:
        if value is None:
            return [] if type(None) in args else [f"{where}: null"]
        (inner,) = [a for a in args if a is not type(None)]
        return type_errors(value, inner, where)
    if typing.is_typeddict(hint):
        keys = typing.get_type_hints(hint)
        if not isinstance(value, dict) or set(value) != set(keys):
            return [f"{where}: {value!r} is not {{{', '.join(keys)}}}"]
        return [e for k, v in value.items() for e in type_errors(v, keys[k], f"{where}.{k}")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {value!r} is not a dict"]
        return [e for k, v in value.items() for e in type_errors(k, args[0], where) + type_errors(v, args[1], f"{where}.{k}")]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {value!r} is not a list"]
        return [e for i, v in enumerate(value) for e in type_errors(v, args[0], f"{where}[{i}]")]
    wanted = (int, float) if hint is float else hint  # an int is a float's value (PEP 484's numeric tower)
    ok = isinstance(value, wanted) and not (isinstance(value, bool) and hint in (int, float))
    return [] if ok else [f"{where}: {value!r} is not {hint.__name__}"]


def assert_complete(record: dict) -> None:
    """Every key of the schema, in its order, each of its type; nothing else but the keys written when set."""
    assert list(record)[:len(KEYS)] == list(KEYS)
    assert set(record) - set(KEYS) <= set(WHEN_SET_KEYS), set(record) - set(KEYS)
    assert record["schema_version"] == SCHEMA_VERSION
    assert not [e for key, value in record.items() for e in type_errors(value, HINTS[key], key)]


def full_record() -> RunRecord:
    """A record with every key set, each to a value of its type."""
    return RunRecord.start(CHOICES, OVERRIDES, {"torch": "2.14", "world_size": 1}, "r1").set(
        status="ok", reason=None, task="Classification", throughput=1234.5, tokens_per_s=5.0e5,
        step_time_ms={"median": 12.5, "p90": 14.0, "spread": 2.0, "windows": 4}, epoch_time_s=3.5,
        epoch_times_s=[4.0, 3.5], warmup_s=1.25, data_wait_frac=0.02, peak_mem_gb=1.5,
        peak_mem_kind="cuda_max_memory_allocated_after_warmup", gpu_util=97.5, final_loss=0.125,
        val_metrics={"accuracy": 0.9, "loss": 0.3}, primary_metric={"name": "accuracy", "value": 0.9,
                                                                    "higher_is_better": True},
        accuracy=0.9, val_loss=0.3, corpus_baselines={"bigram": 2.0, "unigram": 3.0, "uniform": 5.5},
        nonfinite_steps=1, steps=40, measured_steps=32, compile_fallback="BackendCompilerFailed: x",
        flops_per_sample=1.5e9, flops_method="GPT.flops_per_sample", peak_tflops=989.0, mfu=0.4,
        checkpoint="checkpoints/step-00000040.pt", checkpoint_stall_s={"median": 0.05, "max": 0.2, "count": 3,
                                                                       "write_median": 0.4},
        weights="ema", weights_file="checkpoints/last.pt", val_metrics_raw={"accuracy": 0.88, "loss": 0.35},
        best={"step": 30, "value": 0.91}, stopped_early=True, grad_norm=0.75, batch_size=256,
        batch_size_search={"goal": "fastest", "cap": 1024, "chosen": 256, "seconds": 9.5, "probes": []},
        per_rank={"throughput": [617.25, 617.25]}, warnings=["a warning"], traceback="Traceback ...",
        repeats={"n": 2, "dirs": ["repeat-0", "repeat-1"], "throughput": [1200.0, 1269.0], "min": 1200.0,
                 "max": 1269.0, "spread": 0.056},
        exitcode=-15)


def metrics_section() -> str:
    text = (REPO / "docs" / "measuring.md").read_text()
    return text[text.index("## metrics.json"):text.index("### Schema versions")]


# ------------------------------------------------------------------ the schema and its docs
def test_the_docs_table_lists_every_key_and_no_other():
    section = metrics_section()
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    listed = {key for row in rows for key in re.findall(r"`(\w+)`", row.split(" | ")[0])}
    assert listed <= set(FIELDS), listed - set(FIELDS)  # the table names no key the record lacks
    mentioned = set(re.findall(r"`(\w+)`", section))
    assert set(FIELDS) <= mentioned, set(FIELDS) - mentioned  # every key has its words
    assert f"the record's version ({SCHEMA_VERSION};" in section


def test_every_key_round_trips_through_metrics_json_in_order(tmp_path):
    record = full_record()
    results.write(tmp_path, record)
    text = (tmp_path / results.FILE).read_text()
    back = json.loads(text)
    assert list(back) == list(FIELDS)  # every key, in the schema's order (the when-set ones last)
    assert_complete(back)
    assert RunRecord.from_dict(back) == record
    results.write(tmp_path, RunRecord.from_dict(back))
    assert (tmp_path / results.FILE).read_text() == text
    plain = RunRecord.start(CHOICES, OVERRIDES).to_dict()
    assert list(plain) == list(KEYS) and plain["status"] == "failed" and plain["warnings"] == []


def test_a_misspelt_key_is_an_error_not_a_new_key(tmp_path):
    record = RunRecord.start(CHOICES, OVERRIDES)
    with pytest.raises(AttributeError):
        record.thruput = 1.0
    with pytest.raises(AttributeError, match=r"metrics.json has no key 'thruput'"):
        record.set(throughput=1.0, thruput=1.0)
    assert record.throughput is None  # nothing was set
    with pytest.raises(AttributeError, match=r"no key 'acuracy'"):
        RunRecord.from_dict({"status": "ok", "acuracy": 0.9})
    with pytest.raises(ValueError, match=r"status is one of ok, failed, preempted, interrupted, running, not 'okay'"):
        record.set(status="okay")
    with pytest.raises(ValueError, match=r"did not finish has status"):
        record.fail("why", status="ok")
    with pytest.raises(ValueError, match=r"schema version 1"):
        RunRecord.from_dict({"schema_version": 1, "status": "ok"})
    with pytest.raises(TypeError, match=r"takes a RunRecord, not dict"):
        results.write(tmp_path, {"status": "ok", "thruput": 1.0})
    assert not (tmp_path / results.FILE).exists()


def test_a_trained_runs_record_has_every_key_typed_and_round_trips(tmp_path):
    returned = run_in_process(tmp_path, TINY + ["train.ema_decay=0.9", "train.checkpoint_every=5"])
    written = json.loads((tmp_path / results.FILE).read_text())
    assert returned == written and list(written) == list(KEYS)
    assert_complete(written)
    assert written["status"] == "ok" and written["checkpoint_stall_s"]["count"] >= 2 and written["best"]
    again = RunRecord.from_dict(written)
    assert again.to_dict() == written
    text = summary_text(again)
    assert text.startswith("fastpipe run summary") and "accuracy" in text and "(primary)" in text
    assert "the EMA's (train.ema_decay); the raw weights: accuracy" in text
    best = next(line for line in text.splitlines() if line.startswith("  best "))
    assert best.endswith(" %")  # in the held-out line's own unit, not a bare fraction


# ------------------------------------------------------------------ every path that ends a run
class FakeCheckpointer:
    """What the trainer's failure path asks of its Checkpointer."""

    def __init__(self, latest=None, step=7):
        self.latest, self.position = latest, SimpleNamespace(step=step)

    def settle(self, barrier=True):
        pass


def trainer(failure: BaseException, latest=None):
    """The trainer's failure path: its own record so far, filled by _record_failure, written."""
    from fastpipe.train.failures import record_failure as _record_failure

    def path(run_dir):
        record = RunRecord.start(CHOICES, OVERRIDES, {"torch": "x"}, "r1").set(steps=3, warmup_s=0.5)
        try:
            raise failure
        except BaseException as exc:
            _record_failure(exc, record, FakeCheckpointer(latest))
        results.write(run_dir, record)
        return record.to_dict()
    return path


def entry_point(exc):
    def path(run_dir):
        from fastpipe.launch.dispatch import refused

        return refused(run_dir, exc, CHOICES, OVERRIDES)
    return path


def ctrl_c_at_the_entry_point(run_dir):
    from fastpipe.__main__ import interrupted

    return interrupted(run_dir, CHOICES, OVERRIDES)


SETTINGS = SimpleNamespace(choices=CHOICES, overrides=OVERRIDES, run_id="r1")


def worker_died(run_dir):
    from fastpipe.launch.dispatch import collect

    results.begin(run_dir, CHOICES, OVERRIDES, "r1")
    return collect(run_dir, -signal.SIGKILL, SETTINGS)


def rank_failed(run_dir):
    from fastpipe.launch.elastic import _failed

    return _failed(run_dir, SETTINGS, "rank 1 of 2 failed: ValueError: bad", "Traceback (rank 1)", 2)


def sweep_job_died(run_dir):
    from hydra_plugins.fastpipe_sweeps.gpus_job import record_death

    config = OmegaConf.create({"hydra": {"runtime": {"choices": CHOICES}, "overrides": {"task": OVERRIDES}}})
    return record_death(SimpleNamespace(config=config, run_dir=run_dir), -signal.SIGKILL, None)


def repeat_failed(run_dir):
    from fastpipe.launch.repeats import launch_repeats

    outcomes = iter([full_record().set(repeats=None).to_dict(), failed("boom", CHOICES, OVERRIDES).to_dict()])
    return launch_repeats(lambda settings, folder: next(outcomes), SimpleNamespace(report=SimpleNamespace(repeats=3)),
                          run_dir)


def began(run_dir):
    results.begin(run_dir, CHOICES, OVERRIDES, "r1")
    return results.read(run_dir)


PATHS = {  # path -> (status, reason, more keys the record holds)
    "trainer-crash": (trainer(RuntimeError("boom\nmore")), "failed", r"^RuntimeError: boom$", {"steps": 3}),
    "trainer-nonfinite": (trainer(TrainingError("the loss was non-finite", metrics={"steps": 8, "nonfinite_steps": 5,
                                                                                     "checkpoint": "c4.pt"})),
                          "failed", "^the loss was non-finite$", {"steps": 8, "nonfinite_steps": 5, "checkpoint": "c4.pt"}),
    "trainer-preempted": (trainer(Preempted("stopped by SIGTERM at step 9", metrics={"status": "preempted", "steps": 9,
                                                                                     "checkpoint": "c9.pt"})),
                          "preempted", "^stopped by SIGTERM at step 9$", {"steps": 9, "checkpoint": "c9.pt"}),
    "trainer-ctrl-c": (trainer(KeyboardInterrupt(), latest=Path("c6.pt")), "interrupted",
                       r"^interrupted \(Ctrl-C\) at step 7; the newest good checkpoint is c6.pt$",
                       {"steps": 7, "checkpoint": "c6.pt"}),
    "entry-bad-input": (entry_point(ConfigError("data=nope is not a loader")), "failed", "^data=nope is not a loader$",
                        {"run_id": None}),
    "entry-stop-signal": (entry_point(Preempted("stopped by SIGTERM while starting up", metrics={"status": "preempted"})),
                          "preempted", "^stopped by SIGTERM while starting up$", {}),
    "entry-ctrl-c": (ctrl_c_at_the_entry_point, "interrupted", r"^interrupted \(Ctrl-C\); no checkpoint was written$",
                     {"checkpoint": None}),
    "launcher-worker-died": (worker_died, "failed", "^training process killed by SIGKILL", {"run_id": "r1"}),
    "elastic-rank-failed": (rank_failed, "failed", "^rank 1 of 2 failed: ValueError: bad$",
                            {"traceback": "Traceback (rank 1)"}),
    "gpus-launcher-job-died": (sweep_job_died, "failed", "^the job process killed by SIGKILL", {}),
    "repeats-one-failed": (repeat_failed, "failed", "^repeat 2 of 3: boom$", {}),
    "begin-running": (began, "running", "^the run did not finish", {"run_id": "r1"}),
}


@pytest.mark.parametrize("name", PATHS)
def test_every_path_that_ends_a_run_writes_a_complete_record_with_its_reason(tmp_path, name):
    path, status, reason, more = PATHS[name]
    returned = path(tmp_path)
    written = json.loads((tmp_path / results.FILE).read_text())
    assert_complete(written)
    assert written["status"] == status and re.search(reason, written["reason"]), written["reason"]
    assert written["choices"] == CHOICES and written["overrides"] == OVERRIDES
    assert {k: written.get(k) for k in more} == more
    assert ("traceback" in written) == (name in ("trainer-crash", "elastic-rank-failed"))  # crashes only
    assert {k: v for k, v in returned.items() if k != "exitcode"} == written  # what the caller sees is the file


def test_a_dropped_keys_note_is_printed_once_with_the_summarys_warnings(tmp_path, capfd):
    """Printed as the run started and again in its summary, each note showed twice; the summary (and
    summary.txt, metrics.json's warnings) keeps it, once."""
    note = "launcher.bucket_cap_mb=5 does not apply to launcher=single (a key of launcher=ddp): ignored for this run"
    m = run_in_process(tmp_path, TINY + ["train.max_steps=3", "launcher.bucket_cap_mb=5"])
    out, err = capfd.readouterr()
    assert m["warnings"] == [note] and note not in err and out.count(note) == 1
    assert f"  warning      {note}" in (tmp_path / "summary.txt").read_text()


def test_the_target_line_gives_the_metric_in_the_held_out_lines_unit():
    from fastpipe.record.summary import target_text

    t = {"metric": "accuracy", "value": 0.95, "higher_is_better": True, "reached": True, "steps": 40, "seconds": 7.5,
         "seconds_end_to_end": 9.0, "samples": 2560, "reached_value": 0.9512, "best_value": 0.9512}
    assert target_text(t).endswith("2,560 samples: accuracy 95.12 %")
    missed = dict(t, reached=False, best_value=0.931)
    assert target_text(missed) == "accuracy >= 0.95 NOT reached in 7.50 s (40 steps): best accuracy 93.10 %"
    assert target_text(dict(t, metric="loss", value=2.0, reached_value=1.98)).endswith("samples: loss 1.98")


@pytest.mark.parametrize("links", [True, False])
def test_a_new_run_keeps_the_earlier_record_aside_and_the_folder_always_holds_one(links, tmp_path, monkeypatch):
    """results.begin keeps the earlier record as metrics.previous.json while it stays in place until the
    new one replaces it in one rename (a reader never finds the folder without a record; a file system
    without hard links gets a copy); a new record that cannot be written leaves no stale one behind."""
    import os

    earlier = full_record().set(run_id="r0")
    results.write(tmp_path, earlier)
    if not links:
        monkeypatch.setattr(os, "link", lambda *a: (_ for _ in ()).throw(OSError(1, "no hard links here")))
    real = results.write_json_atomic
    seen = []
    monkeypatch.setattr(results, "write_json_atomic", lambda path, payload: (
        seen.append(json.loads(path.read_text())["run_id"]), real(path, payload)))
    results.begin(tmp_path, CHOICES, OVERRIDES, "r1")
    assert seen == ["r0"]  # still in place as the new record was written over it
    assert results.read(tmp_path)["status"] == "running" and results.read(tmp_path)["run_id"] == "r1"
    assert json.loads((tmp_path / results.PREVIOUS).read_text())["run_id"] == "r0"

    def full_disk(path, payload):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(results, "write_json_atomic", full_disk)
    with pytest.raises(OSError):
        results.begin(tmp_path, CHOICES, OVERRIDES, "r2")
    assert results.read(tmp_path) is None  # r1's record is not left standing as r2's
    assert json.loads((tmp_path / results.PREVIOUS).read_text())["run_id"] == "r1"
    assert sorted(p.name for p in tmp_path.iterdir()) == [results.PREVIOUS]  # no temporary file left


def test_the_summary_gives_every_epochs_time_not_the_last_ones_alone():
    from fastpipe.record.summary import epochs_text

    many = RunRecord.from_dict({"epoch_times_s": [11.67, 1.05, 1.2, 1.1], "epoch_time_s": 1.1})
    assert epochs_text(many) == "epochs 4: median 1.15 s (1.05-11.67 s)"
    assert epochs_text(RunRecord.from_dict({"epoch_times_s": [2.5], "epoch_time_s": 2.5})) == "epoch 2.50 s"
    assert epochs_text(RunRecord.from_dict({})) == "epoch n/a"


def test_a_sweep_folder_is_refused_for_its_finished_jobs_and_a_record_that_is_no_object_is_none(tmp_path):
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / results.FILE).write_text("[1, 2, 3]")  # not a record: not a finished job, no traceback
    results.refuse_finished_sweep(tmp_path)
    (tmp_path / "1" / "round-0").mkdir(parents=True)
    (tmp_path / "1" / "round-0" / results.FILE).write_text(json.dumps({"status": "ok"}))
    with pytest.raises(ConfigError, match=r"holds a sweep whose 1 job\(s\) finished \(1/round-0/ first\)"):
        results.refuse_finished_sweep(tmp_path)


def test_the_summary_says_what_the_range_test_cost_against_the_time_to_target():
    # issue 55 item 4: the range test is set-up time every run that searches pays; the summary says how much
    from fastpipe.record.run_record import RunRecord

    search = {"rule": "valley", "steps": 100, "suggestion": 0.0005, "factor": 2.0, "seconds": 13.7}
    target = {"metric": "accuracy", "value": 0.9, "reached": True, "seconds": 22.2, "seconds_end_to_end": 40.0,
              "steps": 250, "samples": 64000, "reached_value": 0.93, "best_value": 0.93}
    clock = {"wall_s": 60.0, "setup": 20.0, "compile": 0.0, "train": 30.0, "eval": 5.0, "checkpoint": 0.0}
    reached = RunRecord(status="ok", lr_search=search, target=target, time_breakdown_s=clock)
    assert "  lr search    0.001 (valley of a 100-step range test) in 13.7 s of set-up: 62 % of the 22.2 s to the " \
           "target" in summary_text(reached)
    missed = RunRecord.from_dict(reached.to_dict()).set(target=dict(target, reached=False, seconds=40.0))
    assert "13.7 s of set-up: 46 % of the 30.0 s of training" in summary_text(missed)
    reused = RunRecord.from_dict(reached.to_dict()).set(lr_search=dict(search, reused_from="/sweep/lr-search"))
    assert "0.001 (valley of a 100-step range test reused from /sweep/lr-search: 0 s here)" in summary_text(reused)
