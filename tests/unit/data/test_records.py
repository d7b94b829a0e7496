"""data=mmap for datasets that are not images: records packs (pack format version 2).

The datasets, model and task are a project's own (tests/support/record_data.py), named by
``_target_: record_data.NAME`` from a temporary conf/ folder.
"""
from __future__ import annotations


import numpy as np
import pytest
import torch
from conftest import cpu_runtime, make_settings, run_in_process
from torch.utils.data import default_collate

from fastpipe.cli.pack import main as pack_main
from fastpipe.data import build_loader, shapes
from fastpipe.data.pack.format import TRAIN, VAL
from fastpipe.data.pack.reader import PackReader
from fastpipe.data.pack.records import (
    RecordPack,
    _wheres,
    flatten,
    layout_of,
    pack_records,
    unflatten,
)
from fastpipe.data.splits import build_dataset
from fastpipe.errors import DataError

from ..conftest import composed


CONFIGS = {
    "dataset/vectors.yaml": "_target_: record_data.Vectors\nn: 60\nlabel_shape: []\n",
    "dataset/nested.yaml": "_target_: record_data.Nested\nn: 40\nscalars: true\n",
    "dataset/varying.yaml": "_target_: record_data.Varying\nn: 30\n",
    "dataset/mine.yaml": "_target_: record_data.Vectors\nn: 40\nlabel_shape: [1]\n",
    "model/linear.yaml": "_target_: record_data.Linear\nin_features: 4\n",
    "task/mse.yaml": "_target_: record_data.MSE\n",
}


@pytest.fixture(scope="module")
def conf(tmp_path_factory):
    """The project's conf/ folder (what --config-dir adds to Hydra's search path)."""
    folder = tmp_path_factory.mktemp("project") / "conf"
    for name, text in CONFIGS.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """A fresh cache per test: "packed now" and "reused" are this test's own."""
    monkeypatch.setenv("FASTPIPE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def settings(conf, *overrides, data="mmap"):
    loader = ["data.num_workers=0"] if data == "default" else ["data.num_threads=1"]
    return composed([f"hydra.searchpath=[file://{conf}]", f"data={data}", "train.batch_size=8",
                          "runtime.progress=false", *loader, *overrides])


def build(conf, *overrides, data="mmap", train=True):
    """(DataSplits, loader) built as graph.build builds them, on the CPU."""
    s = settings(conf, *overrides, data=data)
    splits = build_dataset(s.dataset, cpu_runtime(), s.choices["dataset"])
    return splits, build_loader(s.data, splits, cpu_runtime(), s.train.batch_size, s.seed, train, False)


def assert_same_batch(got, expected, where="batch"):
    """Same structure (a tuple and default_collate's list alike), and per tensor the same dtype, shape, values."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor), where
        assert (got.dtype, tuple(got.shape)) == (expected.dtype, tuple(expected.shape)), where
        assert torch.equal(got, expected), where
    elif isinstance(expected, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(expected), where
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_same_batch(g, e, f"{where}[{i}]")
    else:
        assert isinstance(got, dict) and set(got) == set(expected), where
        for k in expected:
            assert_same_batch(got[k], expected[k], f"{where}[{k!r}]")


# ------------------------------------------------------------------ flatten, layout
def test_flatten_names_the_leaves_and_unflatten_rebuilds_the_sample():
    sample = ((torch.ones(3), torch.tensor([1, 2], dtype=torch.int32)), {"y": torch.tensor(1), "w": 0.5})
    structure, leaves = flatten(sample)
    assert [name for name, _ in leaves] == ["f0", "f1", "f2", "f3"]  # numbered: no two keys can collide
    assert [w for _, w in _wheres(structure)] == ["sample[0][0]", "sample[0][1]", "sample[1]['y']", "sample[1]['w']"]
    w = dict(leaves)["f3"]
    assert w.dtype == torch.float64 and w.dim() == 0 and float(w) == 0.5  # a float is a 0-d float64
    rebuilt = unflatten(structure, dict(leaves))
    assert_same_batch(rebuilt, [list(sample[0]), {"y": torch.tensor(1), "w": torch.tensor(0.5, dtype=torch.float64)}])
    assert isinstance(rebuilt, list) and isinstance(rebuilt[0], list) and list(rebuilt[1]) == ["y", "w"]
    numbers = dict(flatten((3, True))[1])
    assert (numbers["f0"].dtype, numbers["f1"].dtype) == (torch.int64, torch.bool)
    clash = flatten({"a.b": torch.zeros(2), "a": {"b": torch.ones(2), 1: torch.ones(1)}})
    assert unflatten(clash[0], dict(clash[1]))["a"][1].shape == (1,)  # an int key stays an int
    assert torch.equal(unflatten(clash[0], dict(clash[1]))["a.b"], torch.zeros(2))
    with pytest.raises(DataError, match=r"data=mmap packs tensors and numbers, but sample\[1\]\['name'\] is a str; "
                                        "use data=default"):
        flatten((torch.ones(2), {"name": "cat"}))


def test_layout_of_lays_the_fields_end_to_end():
    sample = ((torch.ones(3), torch.tensor([1, 2], dtype=torch.int32)),
              {"y": torch.tensor(1), "w": 0.5, "ok": True, "img": torch.zeros(2, 2, dtype=torch.uint8)})
    structure, fields, record_bytes = layout_of(sample)
    assert [(f["name"], np.dtype(f["dtype"]), f["shape"], f["offset"]) for f in fields] == [
        ("f0", np.float32, [3], 0), ("f1", np.int32, [2], 12), ("f2", np.int64, [], 20),
        ("f3", np.float64, [], 28), ("f4", np.bool_, [], 36), ("f5", np.uint8, [2, 2], 37)]
    assert record_bytes == 41 and structure == flatten(sample)[0]


# ------------------------------------------------------------------ packs against default_collate
def arrays_sample(i):
    return ((torch.full((3,), i / 4), torch.tensor([i, -i], dtype=torch.int32)),
            {"y": torch.tensor([i % 2]), "w": torch.tensor([0.25 * i, 1.0], dtype=torch.float64),
             "img": torch.full((2, 2), i, dtype=torch.uint8), "h": torch.tensor([i / 8], dtype=torch.float16)})


def numbers_sample(i):
    return ((torch.full((3,), i / 4), torch.tensor(i)), {"n": i * 3, "f": i / 3, "b": bool(i % 2)})


@pytest.mark.parametrize("make", [arrays_sample, numbers_sample],
                         ids=["tensors", "python-numbers"])
def test_records_pack_reads_exactly_what_default_collate_gives(make, tmp_path):
    train, val = [make(i) for i in range(10)], [make(i) for i in range(10, 14)]
    out = pack_records(train, val, tmp_path / "r.fppack", {"dataset": "test"}, chunk_records=4)
    reader = PackReader(out)
    reader.verify()
    pack = RecordPack(reader)
    assert (reader.version, reader.count, reader.num_chunks) == (2, 14, 4) and not reader.is_images
    assert pack.indices(TRAIN).tolist() == list(range(10)) and pack.indices(VAL).tolist() == list(range(10, 14))
    everything = train + val
    for idx in ([0, 1, 2], [9, 3, 3, 7], pack.indices(VAL).tolist()):  # any order, repeats included
        assert_same_batch(pack.read_batch(np.asarray(idx)), default_collate([everything[i] for i in idx]))


# ------------------------------------------------------------------ through the real loaders
DATASETS = [pytest.param(["dataset=vectors"], id="vectors-scalar-label"),
            pytest.param(["dataset=vectors", "dataset.label_shape=[1]"], id="vectors-label[1]"),
            pytest.param(["dataset=nested"], id="nested-numbers"),
            pytest.param(["dataset=nested", "dataset.scalars=false"], id="nested-arrays")]


@pytest.mark.parametrize("dataset", DATASETS)
def test_mmap_and_default_give_identical_held_out_batches(conf, dataset):
    splits, mm = build(conf, *dataset, train=False)
    _, ref = build(conf, *dataset, data="default", train=False)
    assert "(cache, packed now)" in mm.describe() and "as stored" in mm.describe()
    batches, expected = list(mm), list(ref)
    assert len(batches) == len(expected) == -(-len(splits.val) // 8) >= 2
    for (x, y), (ex, ey) in zip(batches, expected):
        assert_same_batch(x, ex, "inputs")
        assert_same_batch(y, ey, "targets")


@pytest.mark.parametrize("dataset", DATASETS[:2])
def test_records_cache_packs_once_then_reuses_and_keys_by_the_config(conf, own_cache, dataset):
    _, first = build(conf, *dataset)
    assert "(cache, packed now)" in first.describe() and "pack=" in first.describe()
    (pack,) = (own_cache / "packs").glob("*.fppack")
    assert pack.name.startswith("vectors-records-")
    assert "records" in PackReader(pack).describe() and "format v2" in PackReader(pack).describe()
    stamp = pack.stat().st_mtime_ns
    assert "(cache, reused)" in build(conf, *dataset)[1].describe()
    assert "(cache, reused)" in build(conf, *dataset, train=False)[1].describe()
    assert pack.stat().st_mtime_ns == stamp and len(list((own_cache / "packs").glob("*.fppack"))) == 1
    assert "(cache, packed now)" in build(conf, *dataset, "dataset.n=64")[1].describe()  # other data, other pack
    assert len(list((own_cache / "packs").glob("*.fppack"))) == 2


@pytest.mark.parametrize("dataset", DATASETS[:2])
def test_training_batches_cover_each_training_sample_once_per_epoch(conf, dataset):
    splits, loader = build(conf, *dataset, "data.drop_last=false")
    train_indices = sorted(splits.train.indices)  # the hash split's training samples
    assert len(loader) == -(-len(train_indices) // 8)
    orders = []
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        seen = []
        for x, y in loader:
            assert x.dtype == torch.float32 and x.shape[1:] == (4,) and y.dtype == torch.int64
            ids = torch.round(x[:, 0] * 1024).long()
            assert torch.equal(y.reshape(-1), ids % 3) and torch.equal(x[:, 1].long(), ids % 3)  # intact records
            seen += ids.tolist()
        assert sorted(seen) == train_indices  # each once
        orders.append(seen)
    assert orders[0] != orders[1]  # reshuffled per epoch


def test_varying_shapes_are_refused_with_use_data_default(conf, own_cache):
    with pytest.raises(DataError, match=r"data=mmap needs fixed-shape samples, but sample\[0\] is .* in sample \d+ "
                                        r"of the pack and .* in the first; use data=default"):
        build(conf, "dataset=varying")
    assert not list((own_cache / "packs").glob("*.fppack"))  # no pack, no temporary file left behind
    assert not list((own_cache / "packs").glob(".*tmp*"))


# ------------------------------------------------------------------ python -m fastpipe.pack, format versions
def test_pack_cli_writes_a_records_pack_of_a_project_dataset(conf, tmp_path, capsys):
    out = tmp_path / "mine.fppack"
    assert pack_main(["mine", str(out), "dataset.n=48", "--config-dir", str(conf), "--no-progress"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("wrote ") and "48 records" in said and "(sample[0], sample[1])" in said
    assert " records/s)" in said and "images" not in said  # the packing rate in the pack's own unit
    reader = PackReader(out)
    assert "records" in reader.describe() and "format v2" in reader.describe() and not reader.is_images
    assert reader.meta["dataset"] == "mine" and reader.width == 4 * 4 + 8  # float32[4] + int64[1] per record
    s = settings(conf, "dataset=mine", "dataset.n=48")
    splits = build_dataset(s.dataset, cpu_runtime(), "mine")
    pack = RecordPack(reader)
    for split, part in ((TRAIN, splits.train), (VAL, splits.val)):
        idx = pack.indices(split)
        assert len(idx) == len(part)
        assert_same_batch(pack.read_batch(idx), default_collate([part[i] for i in range(len(part))]))
    assert pack_main(["--verify", str(out), "--no-progress"]) == 0
    assert "ok  " in capsys.readouterr().out
    _, loader = build(conf, "dataset=mine", "dataset.n=48", f"data.path={out}", train=False)  # data.path= the file
    assert f"pack={out} (given)" in loader.describe()
    capsys.readouterr()  # another dataset's records packed into it replace it only with --force
    assert pack_main(["mine", str(out), "dataset.n=40", "--config-dir", str(conf), "--no-progress"]) == 2
    assert f"{out} holds a pack of other files or settings (48 records" in capsys.readouterr().err


def patched(src, dst, version: int):
    """A copy of ``src`` whose header claims ``version`` (bytes 8..12: not covered by the header checksum)."""
    data = bytearray(src.read_bytes())
    data[8:12] = version.to_bytes(4, "little")
    dst.write_bytes(bytes(data))
    return dst


def test_a_records_pack_claiming_version_1_is_refused(tmp_path):
    samples = [arrays_sample(i) for i in range(6)]
    out = pack_records(samples[:4], samples[4:], tmp_path / "r.fppack", {})
    with pytest.raises(DataError, match=r"v1\.fppack claims format version 1, which holds images only, but stores "
                                        r"records; repack it"):
        PackReader(patched(out, tmp_path / "v1.fppack", 1))


def test_a_version_1_images_pack_still_reads(tmp_path):
    folder = shapes.generate(tmp_path / "images", 2, 40, (20, 20), seed=1)
    v2 = tmp_path / "v2.fppack"
    assert pack_main([str(folder), str(v2), "--size", "16", "--threads", "1", "--no-progress"]) == 0
    v1 = patched(v2, tmp_path / "v1.fppack", 1)
    old, new = PackReader(v1), PackReader(v2)
    assert (old.version, new.version) == (1, 2)
    assert old.describe().endswith("format v1") and "40 images" in old.describe()
    assert np.array_equal(old.images, new.images) and np.array_equal(old.labels, new.labels)
    assert np.array_equal(old.split, new.split) and old.classes == new.classes
    old.verify()  # the image checksums hold
    with pytest.raises(DataError, match="holds images, not records"):
        RecordPack(old)
    batches = []  # data=mmap reads it as it reads the current version
    for pack in (v1, v2):
        s = make_settings(["data=mmap", "dataset=imagefolder", f"dataset.root={folder}", "dataset.image_size=16",
                           f"data.path={pack}", "train.batch_size=8", "runtime.progress=false"])
        splits = build_dataset(s.dataset, cpu_runtime(), "imagefolder")
        batches.append(list(build_loader(s.data, splits, cpu_runtime(), 8, 0, False, False)))
    assert len(batches[0]) == len(batches[1]) >= 1
    for (xa, ya), (xb, yb) in zip(*batches):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


# ------------------------------------------------------------------ a whole run (slow)
@pytest.mark.parametrize("dataset", DATASETS[:2])
def test_project_run_through_mmap_reports_its_own_metric(conf, tmp_path, dataset):
    m = run_in_process(tmp_path / "run", [f"hydra.searchpath=[file://{conf}]", *dataset, "dataset.n=160",
                                          "model=linear", "task=mse", "data=mmap", "data.num_threads=1",
                                          "optimizer.lr=0.05", "train.batch_size=8", "train.epochs=4",
                                          "measure.warmup_steps=2", "measure.window=3", "runtime.progress=false"])
    assert m["status"] == "ok" and m["task"] == "MSE" and m["choices"]["data"] == "mmap" and m["accuracy"] is None
    val = m["val_metrics"]
    assert set(val) == {"mse", "rmse"} and val["rmse"] == pytest.approx(val["mse"] ** 0.5)
    assert m["primary_metric"] == {"name": "mse", "value": val["mse"], "higher_is_better": False}
    assert val["mse"] < 0.2, val  # the label is x[1]: learned (predicting the mean gives ~0.67)
    graph = (tmp_path / "run" / "graph.txt").read_text()
    assert "data=mmap  pack=" in graph and "(cache, packed now)" in graph
    assert "MSE  primary metric: mse (lower is better)" in graph
