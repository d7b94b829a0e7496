"""hydra/sweeper=autotune end to end (issue 56): real jobs through Hydra's launcher, the report and best.yaml
(the climb's decisions on stub jobs: tests/unit/sweeps/test_autotune.py)."""
from __future__ import annotations

import json

from conftest import TINY, in_process

# The project's model sleeps 300 ms a training step (fault_models.KilledAt, mode slow); the space offers a
# mode with a bug (a failed trial) and one that does not sleep, and the bound table's keys stay fixed. The
# jobs train in this process (launcher.fresh_process=false): quicker, and no process is the subject here.
SLOW = ["model._target_=fault_models.KilledAt", "+model.mode=slow", *TINY, "logger=none", "hydra/sweeper=autotune",
        "hydra.sweeper.repeats=1", 'hydra.sweeper.space={model.mode: "broken,fast"}', "launcher.fresh_process=false",
        "hydra.sweeper.fixed=[data,compile,precision,train.batch_size,data.num_workers,runtime.channels_last]"]


def test_autotune_keeps_the_change_that_wins_skips_the_one_that_fails_and_writes_best_yaml(tmp_path):
    proc = in_process(["-m", *SLOW, f"hydra.sweep.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((tmp_path / "autotune.json").read_text())
    first = record["steps"][0]
    assert [(c["change"], c["result"]) for c in first["candidates"]] == [("++model.mode=broken", "failed"),
                                                                         ("++model.mode=fast", "won")]
    assert record["final"]["overrides"][-1] == "++model.mode=fast" and record["stopped_by"] == "no_candidate_won"
    assert record["speedup"]["value"] > 3 and len(record["trials"]) == 3
    report = (tmp_path / "report.md").read_text()
    assert "- autotune by throughput: 3 trial(s)" in report and "-> kept ++model.mode=fast" in report
    assert "mode: fast" in (tmp_path / "best.yaml").read_text()
    again = in_process(["-m", *SLOW, f"hydra.sweep.dir={tmp_path}", "sweep.resume=true"])  # every job read back
    resumed = json.loads((tmp_path / "autotune.json").read_text())
    assert again.returncode == 0 and resumed["final"]["trial"] == 2 and resumed["steps"] == record["steps"]
    assert again.stdout.count("fastpipe run summary") == 0  # no job trained again


def test_a_list_on_the_command_line_is_refused_in_one_line(tmp_path):
    proc = in_process(["-m", *SLOW, "compile=off,default", f"hydra.sweep.dir={tmp_path}"])
    assert proc.returncode == 2 and "hydra/sweeper=autotune starts from one configuration" in proc.stderr
    assert not (tmp_path / "0").exists()
