"""The launcher group's schemas: ddp and fsdp keys checked, process counts and backends per device."""
from __future__ import annotations

import os

import pytest

from fastpipe.errors import ConfigError

from conftest import make_settings


# ---------------------------------------------------------------- pieces (fast)
def test_ddp_settings_are_checked():
    assert make_settings(["launcher=ddp"]).launcher.nproc_per_node == "auto"
    with pytest.raises(ConfigError, match="launcher.backend"):
        make_settings(["launcher=ddp", "launcher.backend=mpi"])
    with pytest.raises(ConfigError, match="rdzv_endpoint"):
        make_settings(["launcher=ddp", "launcher.nnodes=2"])
    with pytest.raises(ConfigError, match="nproc_per_node"):
        make_settings(["launcher=ddp", "launcher.nproc_per_node=0"])


def test_ddp_settings_are_checked_for_buckets_and_hooks():
    cfg = make_settings(["launcher=ddp"]).launcher
    assert (cfg.bucket_cap_mb, cfg.comm_hook, cfg.broadcast_buffers) == (None, "none", True)  # DDP's defaults
    with pytest.raises(ConfigError, match="launcher.comm_hook='int8'"):
        make_settings(["launcher=ddp", "launcher.comm_hook=int8"])
    with pytest.raises(ConfigError, match="bucket_cap_mb=0"):
        make_settings(["launcher=ddp", "launcher.bucket_cap_mb=0"])


def test_process_counts_and_backend_resolve_per_device():
    cfg = make_settings(["launcher=ddp", "device=cpu"]).launcher
    assert cfg.processes(gpus=0, cores=16) == 2  # auto on a CPU
    assert cfg.processes(gpus=4, cores=16) == 4  # auto: one per visible GPU
    assert cfg.processes(gpus=0, cores=1) == 1
    cfg.nproc_per_node = 3
    assert cfg.processes(gpus=0, cores=16) == 3
    with pytest.raises(ConfigError, match="2 GPU"):
        cfg.processes(gpus=2, cores=16)
    cfg.nproc_per_node = 64
    with pytest.raises(ConfigError, match=r"launcher.nproc_per_node=64 but this run may use 2 CPU core\(s\) \(its CPU affinity\)"):
        cfg.processes(gpus=0, cores=2)
    assert cfg.backend_for("cpu") == "gloo" and cfg.backend_for("cuda") == "nccl"
    cfg.backend = "nccl"
    with pytest.raises(ConfigError, match="nccl needs CUDA"):
        cfg.backend_for("cpu")


# ---------------------------------------------------------------- config and pieces (fast)
def test_fsdp_launcher_has_its_own_keys_and_not_ddps():
    s = make_settings(["launcher=fsdp", "launcher.shard=[Block]", "launcher.reshard_after_forward=false"])
    assert (s.launcher.name, s.launcher.shard, s.launcher.reshard_after_forward) == ("fsdp", ["Block"], False)
    assert not hasattr(s.launcher, "bucket_cap_mb") and not hasattr(s.launcher, "static_graph")
    ddp_knob = make_settings(["launcher=fsdp", "launcher.bucket_cap_mb=5"])  # a DDP-only knob: dropped under fsdp
    assert not hasattr(ddp_knob.launcher, "bucket_cap_mb") and ddp_knob.notes == [
        "launcher.bucket_cap_mb=5 does not apply to launcher=fsdp (a key of launcher=ddp): ignored for this run"]
    with pytest.raises(ConfigError, match="launcher.shard"):
        make_settings(["launcher=fsdp", "launcher.shard=7"])


def test_too_many_cpu_processes_are_refused_at_once():
    settings = make_settings(["launcher=ddp", "launcher.nproc_per_node=64", "device=cpu"])
    from fastpipe.errors import ConfigError

    cores = os.cpu_count()
    with pytest.raises(ConfigError, match=f"launcher.nproc_per_node=64 but this run may use {cores} CPU core"):
        settings.launcher.processes(0, cores)
