"""``python -m fastpipe.pack`` SRC and OUT: a path is a folder, a bare name a dataset config; a stream
is refused; an OUT of the other kind (pack file / sharded pack's folder) is one line before packing."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import HERE_TESTS
from png_folders import png_folder

from fastpipe.cli.pack import main as pack_main
from fastpipe.data.pack.shards import PackSet

SMALL = ["--size", "8", "--chunk-images", "4", "--threads", "1", "--no-progress"]


def images(root: Path) -> Path:
    return png_folder(root, side=12)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return images(tmp_path_factory.mktemp("src") / "imgs")


def test_a_folder_named_like_a_dataset_config_is_packed_as_the_folder(tmp_path, monkeypatch, capsys):
    images(tmp_path / "synthetic")  # also the name of a built-in dataset config
    monkeypatch.chdir(tmp_path)
    assert pack_main(["synthetic", "a.fppack", *SMALL]) == 0
    pack = PackSet(tmp_path / "a.fppack")
    assert pack.count == 20 and pack.meta["root"] == str(tmp_path / "synthetic")
    assert "packing the folder synthetic, not dataset=synthetic" in capsys.readouterr().err
    assert pack_main(["./synthetic", "b.fppack", *SMALL]) == 0 and PackSet(tmp_path / "b.fppack").count == 20
    assert "not dataset=" not in capsys.readouterr().err  # spelled as a path: nothing to say


def test_a_path_that_is_not_a_folder_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert pack_main(["./shapes", "a.fppack", *SMALL]) == 2
    assert capsys.readouterr().err.strip() == ("fastpipe.pack: error: ./shapes is not a folder (SRC given as a path "
                                               "is an ImageFolder); give an existing folder, or a dataset name (shapes) "
                                               "without a path")
    assert pack_main(["nosuch", "a.fppack", *SMALL]) == 2
    assert "nosuch is neither a folder of images nor a dataset config" in capsys.readouterr().err
    assert not (tmp_path / "a.fppack").exists()


def test_a_stream_dataset_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "s.fppack"
    assert pack_main(["stream", str(out), "--config-dir", str(HERE_TESTS / "conf"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fastpipe.pack: error: dataset=stream is a stream (an IterableDataset): a pack stores "
                          "samples by index") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_an_out_of_the_other_kind_is_one_line_before_packing_and_force_replaces_it(folder, tmp_path, capsys):
    shards, file = tmp_path / "shards", tmp_path / "one.fppack"
    assert pack_main([str(folder), str(shards), "--shard-size", "1KB", *SMALL]) == 0
    assert pack_main([str(folder), str(file), *SMALL]) == 0
    capsys.readouterr()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert pack_main([str(folder), str(shards), *SMALL]) == 2
    assert capsys.readouterr().err == (
        f"fastpipe.pack: error: {shards} is a sharded pack's folder: add the --shard-size it was packed with to "
        "reuse it, --force to replace it with a one-file pack, or choose another OUT\n")
    assert pack_main([str(folder), str(file), "--shard-size", "1KB", *SMALL]) == 2
    assert capsys.readouterr().err == (
        f"fastpipe.pack: error: {file} is a pack file: drop --shard-size to reuse it, --force to replace it "
        "with a sharded pack's folder, or choose another OUT\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, no .partial left
    assert pack_main([str(folder), str(shards), "--force", *SMALL]) == 0
    assert shards.is_file() and PackSet(shards).count == 20 and not PackSet(shards).sharded
    assert pack_main([str(folder), str(file), "--shard-size", "1KB", "--force", *SMALL]) == 0
    assert file.is_dir() and PackSet(file).sharded and PackSet(file).count == 20
    plain = tmp_path / "plain"
    plain.mkdir()
    assert pack_main([str(folder), str(plain), "--force", *SMALL]) == 2  # not a pack: never removed
    assert f"{plain} is a folder but not a sharded pack's" in capsys.readouterr().err and plain.is_dir()
    (plain / "notes.txt").write_text("mine")  # a folder of the user's files, given as --shard-size's OUT
    assert pack_main([str(folder), str(plain), "--shard-size", "1KB", "--force", *SMALL]) == 2
    assert f"{plain} is a folder that holds other files, not a sharded pack" in capsys.readouterr().err
    assert (plain / "notes.txt").read_text() == "mine" and sorted(p.name for p in plain.iterdir()) == ["notes.txt"]
