"""hydra/sweeper=halving's plan: settings, rounds, who is kept, and the grid it starts from."""
from __future__ import annotations

import pytest

from fastpipe.errors import ConfigError
from fastpipe.sweeps.halving.plan import HalvingRecord, HalvingSettings, read, select

from conftest import CONF_DIR
from job_metrics import halving_job as ok


# ------------------------------------------------------------------ the plan (fast)
def test_settings_are_checked_with_the_key_named():
    for bad, key in ((dict(probe_steps=0), "probe_steps"), (dict(keep=1.0), "keep"), (dict(keep=0), "keep"),
                     (dict(finalists=0), "finalists")):
        with pytest.raises(ConfigError, match=f"hydra.sweeper.{key}"):
            HalvingSettings(**bad)
    plan = HalvingSettings(probe_steps=30, keep=0.5)
    assert [plan.probe_steps_in(r) for r in (1, 2, 3)] == [30, 60, 120]  # each round about the same cost
    assert HalvingSettings(probe_steps=10, keep=1 / 3).probe_steps_in(2) == 30


def test_select_keeps_the_fastest_share_and_drops_what_cannot_be_ranked():
    probes = {1: ok(100.0), 2: ok(300.0), 3: ok(200.0), 4: ok(50.0), 5: None,
              6: {"status": "failed", "reason": "boom"}, 7: ok(900.0, compile_fallback="BackendCompilerFailed"),
              8: ok(None)}
    out = select(probes, keep=0.5, finalists=1)
    assert out.kept == [2, 3] and out.dropped == [1, 4] and out.cutoff == 200.0
    assert out.failed == [5, 6, 7, 8]  # missing, failed, fell back to eager, unmeasured: never kept
    assert select({1: ok(1.0), 2: ok(2.0), 3: ok(3.0)}, keep=0.9, finalists=2).kept == [3, 2]  # always drops one
    assert select({1: ok(1.0), 2: ok(2.0)}, keep=0.5, finalists=2).kept == [2, 1]  # never below the finalists


def compose_with_hydra(overrides):
    from hydra import compose, initialize_config_dir

    from fastpipe.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", list(overrides), return_hydra_config=True)


def test_presets_and_command_line_lists_reach_the_halving_sweeper():
    from hydra_plugins.fastpipe_sweeps.halving_sweeper import HalvingSweeper

    cfg = compose_with_hydra(["+sweep=ladder", "hydra/sweeper=halving", "hydra.sweeper.finalists=1"])
    assert cfg.hydra.sweeper._target_.endswith("HalvingSweeper") and cfg.hydra.sweeper.finalists == 1
    sweeper = HalvingSweeper(params=dict(cfg.hydra.sweeper.params))
    sweeper.hydra_context = type("Context", (), {"config_loader": None})()
    combos = sweeper.grid(["train.epochs=2", "precision=fp32,amp"])
    assert combos[:2] == [["+ladder=s0_baseline", "train.epochs=2", "precision=fp32"],
                          ["+ladder=s0_baseline", "train.epochs=2", "precision=amp"]]  # the basic sweeper's order
    assert len(combos) == 8 and combos[-1][0] == "+ladder=s3_amp"


def test_a_halving_record_survives_a_round_trip(tmp_path):
    record = HalvingRecord(settings={"probe_steps": 3}, combos=[["a=1"], ["a=2"]], baseline=0)
    record.rounds.append({"round": 1, "jobs": [1], "kept": [1]})
    record.write(tmp_path)
    back = read(tmp_path)
    assert back.combos == [["a=1"], ["a=2"]] and back.last_round(1)["round"] == 1 and back.last_round(0) is None
    assert read(tmp_path / "nowhere") is None
