"""The bad-input catalogue (docs/errors/config.md), the rows found while composing: each input and exactly what
the user sees."""
from __future__ import annotations

import pytest

from fastpipe.errors import ConfigError

from conftest import compose, make_settings


def message(excinfo) -> str:
    """An exception's text with its causes (Hydra wraps OmegaConf's message)."""
    exc, parts = excinfo.value, []
    while exc is not None:
        parts.append(str(exc))
        exc = exc.__cause__
    return "\n".join(parts)


# ---------------------------------------------------------------- configuration
def test_unknown_choice():
    with pytest.raises(Exception) as excinfo:
        compose(["precision=fp64"])
    assert "Could not find 'precision/fp64'" in message(excinfo) and "fp32" in message(excinfo)


def test_value_of_the_wrong_type():
    with pytest.raises(Exception) as excinfo:
        compose(["train.epochs=abc"])
    assert "Value 'abc' of type 'str' could not be converted to Integer" in message(excinfo)


def test_unknown_key():
    with pytest.raises(ConfigError, match=r"^data.no_such_key is not a key of DefaultLoaderConfig \(its keys: "
                                          r"drop_last, name, num_workers, .*\); fix the spelling$"):
        make_settings(["data.no_such_key=1"])


# ---------------------------------------------------------------- data
def test_imagefolder_without_root():
    with pytest.raises(ConfigError, match="dataset=imagefolder needs a folder: add dataset.root="):
        make_settings(["dataset=imagefolder"])
