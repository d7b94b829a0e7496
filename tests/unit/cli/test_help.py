"""``--help``'s config: each key's meaning beside it, read from the comment beside its schema's field."""
from __future__ import annotations

import re

import yaml
from omegaconf import OmegaConf

from conftest import compose
from fastpipe.cli.help import config_help
from fastpipe.config import MmapLoaderConfig, TrainConfig
from fastpipe.config.meanings import meaning


def test_help_prints_each_keys_meaning_from_its_schemas_comment():
    """--help's config (conf/hydra/help/fastpipe.yaml; the whole --help: tests/integration/test_help.py)."""
    cfg = compose(["data=mmap"])
    config = config_help(_root_=cfg).replace("$$", "$")
    assert yaml.safe_load(config) == OmegaConf.to_container(cfg)  # the composed config, as --cfg job prints it
    notes, path = {}, []
    for line in config.splitlines():
        found = re.match(r"^( *)([\w.]+):(?: .*?)?(?:\s+# (.+))?$", line)
        if found:
            path[len(found[1]) // 2:] = [found[2]]
            notes[".".join(path)] = found[3]
    assert all(notes[f"train.{key}"] == meaning(TrainConfig, key) for key in TrainConfig.__dataclass_fields__)
    assert all(notes[f"data.{key}"] == meaning(MmapLoaderConfig, key) for key in MmapLoaderConfig.__dataclass_fields__)
    assert notes["data.prefetch"] == "batches read ahead of the training step"  # its comment in config/data.py
    assert notes["train.cutmix_alpha"] == notes["train.mixup_alpha"]  # one comment above both
    assert notes["dataset.num_images"] == "an argument of fastpipe.data.images.shapes"
    assert notes["optimizer._target_"].startswith("the callable that builds it") and not notes["optimizer._partial_"]
    assert notes["model.activation_checkpointing"].startswith("recompute each block's activations")
