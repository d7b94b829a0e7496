"""The sweep presets (+sweep=ladder, all): each ladder step is one job with the choices it names."""
from __future__ import annotations

from fastpipe.report.baseline import first_values
from fastpipe.report.jobs import SweepSpec

from conftest import REPO, compose


def test_presets_compose_the_ladder_steps():
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from fastpipe.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        for preset in ("ladder", "all"):
            cfg = hydra_compose("config", [f"+sweep={preset}"], return_hydra_config=True)
            assert cfg.hydra.sweeper.params, preset
        params = hydra_compose("config", ["+sweep=ladder"], return_hydra_config=True).hydra.sweeper.params
    lines = [f"{k}={v}" for k, v in params.items()]
    (batch,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(lines), None)
    assert batch == [["+ladder=s0_baseline"], ["+ladder=s1_loader"], ["+ladder=s2_compile"],
                     ["+ladder=s3_amp"]]  # one job per step, not a product
    steps = [(c.data.name, c.precision.name, c.compile.name) for c in (compose(job) for job in batch)]
    assert steps == [("default", "fp32", "off"), ("mmap", "fp32", "off"), ("mmap", "fp32", "default"),
                     ("mmap", "amp", "default")]
    assert first_values(SweepSpec(["+sweep=ladder"], dict(params))) == ["+ladder=s0_baseline"]
