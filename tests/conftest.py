"""Shared fixtures: compose fastpipe's configs the way the entry point does, and tiny run settings."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from fastpipe.config import GROUPS

REPO = Path(__file__).resolve().parents[1]
HERE_TESTS = Path(__file__).resolve().parent  # test-only modules (fault_models, ...) import from here
CONF_DIR = REPO / "conf"

# Generated datasets and packs go to a per-session cache, inherited by subprocesses too.
os.environ.setdefault("FASTPIPE_CACHE", tempfile.mkdtemp(prefix="fastpipe-test-cache-"))

# Small and fast: a few hundred 16x16 images, few steps, short windows, no progress bar.
TINY = [
    "dataset.num_images=240", "dataset.image_size=16", "train.batch_size=16", "train.max_steps=12",
    "measure.warmup_steps=2", "measure.window=3", "runtime.progress=false", "data.num_workers=0",
]


def compose(overrides=()):
    """The composed DictConfig for ``overrides`` (Hydra's compose API over the repo's conf/)."""
    from hydra import compose as hydra_compose, initialize_config_dir

    from fastpipe.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


def make_settings(overrides=()):
    """Composed and converted settings (dataclasses), with choices filled as the entry point does."""
    from fastpipe.config import to_settings

    cfg = compose(overrides)
    settings = to_settings(cfg, {g: _choice(g, overrides) for g in GROUPS})
    settings.overrides = list(overrides)
    return settings


def _choice(group, overrides):
    """The group's choice: the last ``group=NAME`` override, else the root config's default."""
    import yaml

    chosen = [o.split("=", 1)[1] for o in overrides if o.startswith(f"{group}=")]
    if chosen:
        return chosen[-1]
    defaults = yaml.safe_load((CONF_DIR / "config.yaml").read_text())["defaults"]
    return next(str(d[group]) for d in defaults if isinstance(d, dict) and group in d)


SHAPES_ONLY = ("dataset.num_images", "dataset.num_classes", "dataset.seed", "dataset.source_size")


def without_shapes(overrides):
    """``overrides`` without the shapes dataset's own keys, for a run on another dataset."""
    return [o for o in overrides if not o.startswith(SHAPES_ONLY)]


def run_in_process(run_dir, overrides=()):
    """Train in this process (no fresh worker) and return metrics.json's content."""
    from fastpipe.train.job import run_training

    return run_training(make_settings(list(overrides)), Path(run_dir))


def run_cli(args, cwd=None, timeout=300):
    """``python -m fastpipe ARGS`` in a subprocess; returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-m", "fastpipe", *args], cwd=cwd or REPO, capture_output=True,
                          text=True, timeout=timeout)


def cpu_runtime(dist=None):
    """A CPU Runtime for building loaders and graphs in tests (``dist``: this process's place)."""
    import torch

    from fastpipe.runtime import Dist, Runtime, cache_root, cpu_cores

    return Runtime(torch.device("cpu"), dist or Dist(), cache_root(), cpu_cores())


def shapes_splits(**params):
    """The built-in shapes dataset as DataSplits (generated once into the test cache)."""
    from fastpipe.data.images import shapes
    from fastpipe.data.splits import DataSplits
    from fastpipe.runtime import cache_root

    built = shapes(cache_root=cache_root(), **params)
    return DataSplits("shapes", built["train"], built["val"])


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """One intra-op thread in the test process: tiny models on a shared 2-core machine run many
    times faster without OpenMP threads spinning against DataLoader workers and other processes."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny():
    return list(TINY)
