"""The sweep presets (+sweep=ladder, all, lr): each ladder step is one job with the choices it names; +sweep=lr
races the found learning rate."""
from __future__ import annotations

from fastpipe.report.baseline import first_values
from fastpipe.report.sweep_folder import SweepSpec

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


def test_the_lr_preset_races_the_suggestion_against_a_third_three_times_it_and_the_given_rate():
    from hydra import compose as hydra_compose, initialize_config_dir

    from fastpipe.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = hydra_compose("config", ["+sweep=lr", "train.target=0.9", "train.eval_every=5"], return_hydra_config=True)
    assert cfg.hydra.sweeper._target_.endswith("RaceSweeper")
    assert cfg.hydra.sweeper.params == {"+lr_candidate": "given,auto_third,auto,auto_triple"}
    assert (cfg.train.lr_find_seed, cfg.report.objective) == (0, "time_to_target")
    assert cfg.optimizer.lr != "auto" and cfg.report.baseline == "+lr_candidate=given"  # the project's own rate
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        for choice, factor in (("auto_third", 0.3), ("auto", 1.0), ("auto_triple", 3.0)):
            cfg = hydra_compose("config", [f"+lr_candidate={choice}"])
            assert (cfg.optimizer.lr, cfg.optimizer.lr_auto_factor) == ("auto", factor)
        given = hydra_compose("config", ["+lr_candidate=given", "optimizer.lr=0.05"])
        assert given.optimizer.lr == 0.05
