"""Processes for ddp/fsdp: torch elastic's settings, failure reasons naming the root-cause rank, and
what is refused outside or inside torchrun."""
from __future__ import annotations

import json

import pytest

from fastpipe.errors import ConfigError
from fastpipe.launch.elastic import elastic_config, failure_reason
from fastpipe.launch.dispatch import launch

from conftest import make_settings


def test_fresh_process_false_is_refused_outside_torchrun(tmp_path, monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(ConfigError, match="fresh_process"):
        launch(make_settings(["launcher=ddp", "launcher.fresh_process=false"]), tmp_path)


def test_single_launcher_under_torchrun_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "localhost")
    monkeypatch.setenv("MASTER_PORT", "1")
    with pytest.raises(ConfigError, match="use launcher=ddp"):
        launch(make_settings(["launcher=single"]), tmp_path)


def test_elastic_config_one_node_is_private_and_several_nodes_share_the_endpoint():
    one = elastic_config(make_settings(["launcher=ddp"]).launcher, 2)
    other = elastic_config(make_settings(["launcher=ddp"]).launcher, 2)
    assert (one.rdzv_backend, one.rdzv_endpoint, one.nproc_per_node) == ("c10d", "localhost:0", 2)
    assert one.run_id != other.run_id and one.max_restarts == 0 and one.rdzv_configs["timeout"] == one.rdzv_configs["join_timeout"] == 600
    many = elastic_config(make_settings(["launcher=ddp", "launcher.nnodes=2", "launcher.rdzv_endpoint=node0:29500",
                                         "launcher.rdzv_backend=static", "launcher.node_rank=1"]).launcher, 8)
    assert (many.min_nodes, many.max_nodes, many.rdzv_endpoint, many.run_id) == (2, 2, "node0:29500", "fastpipe")
    assert many.rdzv_configs["rank"] == 1


def _failure(tmp_path, rank, exitcode, message=None, timestamp=1000):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    path = tmp_path / f"error-{rank}.json"
    if message is not None:  # the format torch's @record writes for an exception
        path.write_text(json.dumps({"message": {"message": message, "extraInfo": {
            "py_callstack": f"Traceback ...\n{message}\n", "timestamp": str(timestamp)}}}))
    return ProcessFailure(local_rank=rank, pid=100 + rank, exitcode=exitcode, error_file=str(path))


def test_failure_reason_names_the_root_cause_rank(tmp_path):
    # Same second: rank 0's lost-peer error is a symptom; rank 1's exception is the cause.
    failures = {0: _failure(tmp_path, 0, 1, "DistBackendError: Connection closed by peer [127.0.0.1]:123"),
                1: _failure(tmp_path, 1, 1, "ValueError: bad batch\nmore lines")}
    reason, trace = failure_reason(failures, 2)
    assert reason == "rank 1 of 2 failed: ValueError: bad batch (also failed: rank 0)"
    assert "ValueError: bad batch" in trace


def test_failure_reason_when_a_peer_hung(tmp_path):
    # A hung rank fails nothing itself: its peers time out in a collective. Say so.
    timeout = "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 15000ms for recv"
    reason, _ = failure_reason({0: _failure(tmp_path, 0, 1, timeout)}, 2, timeout_s=15)
    assert reason.startswith("rank 0 of 2 failed: RuntimeError: [gloo")
    assert reason.endswith("[a peer rank stopped answering: hung or dead; launcher.timeout_s=15]")


def test_failure_reason_for_a_killed_rank(tmp_path):
    reason, trace = failure_reason({3: _failure(tmp_path, 3, -9)}, 4)
    assert reason.startswith("rank 3 of 4 failed: training process killed by SIGKILL") and trace is None
    reason, _ = failure_reason({1: _failure(tmp_path, 1, 3)}, 2)
    assert reason == "rank 1 of 2 failed: training process exited with code 3"
