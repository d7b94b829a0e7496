"""Configs and keys written for fastpipe 0.1 still compose, each with a warning naming today's spelling."""
from __future__ import annotations

from conftest import REPO, make_settings


def test_configs_written_for_fastpipe_0_1_still_compose_with_a_warning(tmp_path):
    """``defaults: [schema_model]`` + ``kwargs``, a dataset chosen by ``name``, and ``train.lr``."""
    conf = tmp_path / "conf"
    (conf / "model").mkdir(parents=True)
    (conf / "dataset").mkdir()
    (conf / "model" / "old.yaml").write_text("defaults:\n  - schema_model\n_target_: fastpipe.models.TinyCNN\n"
                                             "kwargs:\n  width: 8\n")
    (conf / "dataset").joinpath("old.yaml").write_text("defaults:\n  - schema_dataset\nname: shapes\n"
                                                       "num_images: 120\nimage_size: 16\n")
    from hydra import compose, initialize_config_dir

    from fastpipe.config import register_configs, to_settings

    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["model=old", "dataset=old", "train.lr=0.01",
                                           f"hydra.searchpath=[file://{conf}]"])
    settings = to_settings(cfg, {"model": "old", "dataset": "old"})
    assert settings.model.params == {"width": 8} and settings.dataset.target == "fastpipe.data.images.shapes"
    assert settings.dataset.params["num_images"] == 120 and settings.optimizer.params["lr"] == 0.01
    notes = " ".join(settings.deprecations)
    assert "model.kwargs is deprecated" in notes and "dataset.name=shapes is deprecated" in notes
    assert "use optimizer.lr=0.01" in notes


def test_old_schedule_keys_still_work_with_a_warning():
    settings = make_settings(["train.lr_schedule=constant", "train.lr_warmup_steps=3"])
    assert settings.lr_schedule.target == "fastpipe.stages.schedules.constant"
    assert settings.lr_schedule.params["warmup_steps"] == 3
    assert any("lr_schedule=constant lr_schedule.warmup_steps=3" in d for d in settings.deprecations)
