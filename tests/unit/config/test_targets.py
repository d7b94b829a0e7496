"""A project's own ``_target_``s: a wrong one is one clear line naming the key."""
from __future__ import annotations

import pytest

from fastpipe.errors import ConfigError

from conftest import make_settings


def test_a_wrong_target_is_one_clear_line_naming_the_key(tmp_path, monkeypatch):
    (tmp_path / "wrongs.py").write_text(
        "import torch\n"
        "def not_a_dataset(): return 42\n"
        "def not_a_model(num_classes=4): return 'a string'\n"
        "class NoMetrics:\n    primary = 'x'\n    higher_is_better = True\n    def loss(self, o, t): return o.sum()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"^model._target_='nosuch.Net' cannot be imported .*PYTHONPATH"):
        make_settings(["model._target_=nosuch.Net"])
    with pytest.raises(ConfigError, match=r"^train.epoch is not a key of TrainConfig \(the nearest: train.epochs; its keys: "):
        make_settings(["+train.epoch=3"])  # added with +: refused, never silently dropped (without +: Hydra's error)
    with pytest.raises(ConfigError, match=r"model.widht is not a parameter of fastpipe.models.TinyCNN"):
        make_settings(["+model.widht=8"])
    with pytest.raises(ConfigError, match=r"optimizer.momentun is not a parameter of torch.optim.SGD"):
        make_settings(["optimizer=sgd", "+optimizer.momentun=0.9"])
    from conftest import run_in_process

    (tmp_path / "conf" / "dataset").mkdir(parents=True)
    (tmp_path / "conf" / "dataset" / "wrong.yaml").write_text("_target_: wrongs.not_a_dataset\n")
    with pytest.raises(ConfigError, match=r"dataset._target_='wrongs.not_a_dataset' returned int; return a map-style"):
        run_in_process(tmp_path / "a", ["dataset=wrong", f"hydra.searchpath=[file://{tmp_path / 'conf'}]"])
    with pytest.raises(ConfigError, match=r"model._target_='wrongs.not_a_model' returned str, not an nn.Module"):
        run_in_process(tmp_path / "b", ["model._target_=wrongs.not_a_model", "dataset.num_images=64",
                                        "dataset.image_size=16", "runtime.progress=false", "data.num_workers=0"])
    with pytest.raises(ConfigError, match=r"task._target_='wrongs.NoMetrics' gives a NoMetrics without metrics"):
        run_in_process(tmp_path / "c", ["task._target_=wrongs.NoMetrics", "dataset.num_images=64",
                                        "dataset.image_size=16", "runtime.progress=false", "data.num_workers=0"])
