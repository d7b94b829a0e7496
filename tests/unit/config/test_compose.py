"""Composition: every choice of every group composes and builds; schemas reject bad values."""
from __future__ import annotations

import pytest
import torch

from fastpipe.config import GROUPS
from fastpipe.errors import ConfigError

from conftest import CONF_DIR, TINY, make_settings


def _have(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def all_choices():
    for group in GROUPS:
        for path in sorted((CONF_DIR / group).glob("*.yaml")):
            marks = []
            if (group, path.stem) == ("data", "dali") and not _have("nvidia.dali"):
                marks.append(pytest.mark.skip(reason='NVIDIA DALI is not installed: pip install "fastpipe[dali]"'))
            yield pytest.param(group, path.stem, marks=marks, id=f"{group}-{path.stem}")


COMPILE_MODES = {"off": None, "default": "default", "reduce-overhead": "reduce-overhead",
                 "max-autotune": "max-autotune"}  # compile=CHOICE -> torch.compile's mode


@pytest.mark.parametrize("group,choice", list(all_choices()))
def test_every_choice_composes_and_builds(group, choice, tmp_path):
    from fastpipe.train import graph
    from fastpipe.runtime import setup_runtime

    overrides = [o for o in TINY if not (group == "data" and o.startswith("data."))] + [f"{group}={choice}"]
    lm = (group == "task" and choice == "lm") or (group == "model" and choice.startswith("gpt")) or choice == "tokens" \
        or (group, choice) == ("precision", "fp8")  # fp8 converts Linear layers: a GPT's, compiled
    if lm:  # the language-modelling trio: each member is tested with the other two
        overrides = [o for o in overrides if not o.startswith("dataset.")] + [
            "task=lm", "dataset=tokens", "model=gpt_tiny", "dataset.seq_len=16", "dataset.windows_per_epoch=64",
            "model.n_layer=1", f"{group}={choice}"]
    if (group, choice) == ("precision", "fp8"):
        overrides += ["compile=default", "compile.backend=eager"]
    if choice == "imagefolder":  # TINY's shapes images, generated once into the test cache, as a folder
        from conftest import shapes_splits

        shapes = shapes_splits(num_images=240, image_size=16)
        overrides = [o for o in overrides if not o.startswith("dataset.num")]
        overrides += [f"dataset.root={shapes.train.root}", "dataset.image_size=16"]
    if choice == "synthetic":
        overrides = [o for o in overrides if not o.startswith("dataset.")] + [
            "dataset.num_images=64", "dataset.num_classes=10", "dataset.image_size=16"]
    if group == "model" and choice.startswith("resnet"):
        overrides += ["dataset.image_size=32"]
    settings = make_settings(overrides)
    if group == "compile" and choice in COMPILE_MODES:  # test_compile_choices_map_to_torch_compile_modes
        assert settings.compile.mode == COMPILE_MODES[choice]
    if choice == "fsdp":  # FSDP2 shards over a process group, which the launcher always starts: one rank here
        store = torch.distributed.FileStore(str(tmp_path / "store"), 1)
        torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        g = graph.build(settings, setup_runtime(settings))
        _check_graph(g, settings, lm)
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def _check_graph(g, settings, lm: bool) -> None:
    from fastpipe.job.graph_text import describe

    text = describe(g, settings)
    assert "fastpipe training graph" in text and len(g.train_loader) > 0
    inputs, targets = next(iter(g.train_loader))
    if lm:
        assert inputs.shape == targets.shape == (settings.train.batch_size, 16) and inputs.dtype == torch.int64
        assert int(inputs.max()) < 256
        return
    size = g.dataset.fact("image_size")
    assert inputs.shape == (settings.train.batch_size, 3, size, size) and inputs.dtype == torch.float32
    assert targets.dtype == torch.int64 and int(targets.max()) < g.dataset.fact("num_classes")


def test_compile_choices_map_to_torch_compile_modes():
    """Each choice's mode is checked on the settings test_every_choice_composes_and_builds composes for it
    (one composition per choice); here, that every one of them is a choice it composes."""
    assert set(COMPILE_MODES) <= {path.stem for path in (CONF_DIR / "compile").glob("*.yaml")}


@pytest.mark.parametrize("override,message", [
    ("train.grad_accum=0", "train.grad_accum=0 must be >= 1"),
    ("precision.dtype=fp8", "precision.dtype='fp8' is not valid"),
    ("device=tpu", "device='tpu' is not valid"),
    ("data.num_workers=-1", "data.num_workers=-1 is not valid"),
    ("+dataset.image_sise=64", "dataset.image_sise is not a parameter of fastpipe.data.images.shapes"),
    ("+model.widht=64", "model.widht is not a parameter of fastpipe.models.TinyCNN (it takes: num_classes, width)"),
])
def test_schema_validation_names_key_and_fix(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_settings([override])


def test_imagefolder_without_root_is_a_clear_error():
    with pytest.raises(ConfigError, match="dataset.root=/path/to/images"):
        make_settings(["dataset=imagefolder", "dataset.root=null"])


# ------------------------------------------------------------------ config checks
@pytest.mark.parametrize("overrides,message", [
    (["task=lm", "dataset=shapes"],
     "task=lm trains on tokens data, but dataset=shapes gives images; choose a matching dataset"),
    (["task=lm", "dataset=synthetic"], "task=lm trains on tokens data, but dataset=synthetic gives images"),
    (["data=dali", "dataset=tokens", "task=lm", "model=gpt_tiny"],
     "data=dali cannot read dataset=tokens: it is a token stream, not image files; use data=default or data=mmap"),
])
def test_combinations_that_cannot_work_are_refused_when_the_settings_are_made(overrides, message):
    with pytest.raises(ConfigError) as err:
        make_settings(overrides)
    assert message in str(err.value)
