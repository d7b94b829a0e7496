"""Fixtures of the JPEG pack tests (DALI's decoder, decode worker processes)."""
from __future__ import annotations

import pytest

from fastpipe.cli.pack import main as pack_main
from fastpipe.data import shapes


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """48 JPEGs of 40x30, 3 classes (38 train, 10 held out)."""
    return shapes.generate(tmp_path_factory.mktemp("dalipack") / "images", 3, 48, (40, 30), seed=7)


@pytest.fixture(scope="module")
def packs(folder, tmp_path_factory):
    """The folder at 32x32: a JPEG file, the same as shards of one chunk of 8 images, and a raw file."""
    out, made = tmp_path_factory.mktemp("out"), {}
    for name, extra in (("jpeg", ["--codec", "jpeg"]), ("jpeg-shards", ["--codec", "jpeg", "--shard-size", "10KB"]),
                        ("raw", [])):
        made[name] = out / name
        assert pack_main([str(folder), str(made[name]), "--size", "32", "--threads", "1", "--chunk-images", "8",
                          "--no-progress", *extra]) == 0
    return made
