"""What the launcher collects from a training process that ended: its results, or why it failed."""
from __future__ import annotations

import json
import signal


def test_results_of_a_finished_worker_survive_a_signal_on_its_way_out(tmp_path):
    """The H200 case: a stop signal reached the trainer just after it had written ok metrics."""
    from conftest import make_settings
    from fastpipe.launch.dispatch import collect
    from fastpipe.record.results import write_json_atomic

    settings = make_settings([])
    settings.choices, settings.overrides, settings.run_id = {}, [], "this-run"
    write_json_atomic(tmp_path / "metrics.json", {"status": "ok", "throughput": 6513.5, "warnings": [],
                                                  "run_id": "this-run"})
    kept = collect(tmp_path, -signal.SIGTERM, settings)
    assert kept["status"] == "ok" and kept["throughput"] == 6513.5 and kept["exitcode"] == -signal.SIGTERM
    assert kept["warnings"] == ["training process killed by SIGTERM after it had finished and written these results"]
    assert json.loads((tmp_path / "metrics.json").read_text())["warnings"] == kept["warnings"]
    (tmp_path / "metrics.json").unlink()  # died before writing anything: a failed row naming the signal
    failed = collect(tmp_path, -signal.SIGTERM, settings)
    assert failed["status"] == "failed" and failed["reason"] == "training process killed by SIGTERM"
