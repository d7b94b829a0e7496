"""hydra/launcher=fastpipe_slurm (hydra-submitit-launcher): the Slurm launcher config composes."""
from __future__ import annotations

from conftest import REPO


# ---------------------------------------------------------------- Slurm (hydra-submitit-launcher)
def test_slurm_launcher_config_composes():
    from hydra import compose as hydra_compose, initialize_config_dir

    from fastpipe.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = hydra_compose("config", overrides=["hydra/launcher=fastpipe_slurm", "launcher=ddp",
                                                 "hydra.launcher.gpus_per_node=8"], return_hydra_config=True)
        plain = hydra_compose("config", overrides=["hydra/launcher=submitit_slurm"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    assert (launcher.nodes, launcher.tasks_per_node, launcher.gpus_per_node) == (1, 1, 8)
    assert launcher.timeout_min == 60 and launcher.signal_delay_s == 120 and launcher.max_num_timeout == 0
    assert cfg.launcher.name == "ddp"
    assert plain.hydra.launcher._target_ == launcher._target_
