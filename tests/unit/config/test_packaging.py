"""conf/ ships inside the package (fastpipe.conf): every YAML must match pyproject's package-data."""
from __future__ import annotations

import fnmatch

import pytest

from conftest import CONF_DIR, REPO

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11 (CI's); 3.10 has no TOML reader


def test_every_config_file_is_covered_by_package_data():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"": "."}  # every package where its name says: a plain editable install
    assert (REPO / "fastpipe" / "conf").is_symlink() and (REPO / "fastpipe" / "conf").resolve() == CONF_DIR.resolve()
    patterns = setuptools["package-data"]["fastpipe.conf"]
    files = [p.relative_to(CONF_DIR).as_posix() for p in CONF_DIR.rglob("*.yaml")]
    assert len(files) > 20
    # setuptools globs do not cross "/": a pattern covers a file when both have the same depth
    missed = [f for f in files if not any(fnmatch.fnmatch(f, pat) and f.count("/") == pat.count("/") for pat in patterns)]
    assert not missed, f"not shipped in a wheel: {missed}"


def test_installed_entry_point_finds_the_packaged_configs():
    from fastpipe.config import config_dir

    assert (CONF_DIR / "config.yaml").samefile(f"{config_dir()}/config.yaml")

