"""dataset=tokens: token files, entropies, training windows and held-out chunks, both loaders alike.
(The task, the GPT model and whole LM runs: tests/unit/stages/test_tasks.py, tests/unit/models/test_gpt.py,
tests/integration/test_lm.py.)"""
from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import cpu_runtime, make_settings

from fastpipe.data import build_loader
from fastpipe.data.splits import build_dataset
from fastpipe.data.tokens import TokenChunks, TokenWindows, entropies, tokens
from fastpipe.errors import ConfigError, DataError
from lm_helpers import NAMES, SEQ, glob_of, lm_overrides, text_of, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A folder of four small text files (1.7 KB of training text, 0.8 KB held out)."""
    return write_corpus(tmp_path_factory.mktemp("corpus"))


def build_tokens(corpus, cache, **kwargs):
    kwargs = {"seq_len": SEQ, "windows_per_epoch": 32, "val_fraction": 0.05, **kwargs}
    return tokens(files=glob_of(corpus), cache_root=cache, **kwargs)


def token_folder(cache: Path) -> Path:
    (folder,) = [p for p in cache.iterdir() if p.name.startswith("tokens-")]
    return folder


# ------------------------------------------------------------------ token files
def test_token_files_hold_the_corpus_bytes_whole_files_per_split(corpus, tmp_path):
    data = {name: (corpus / name).read_bytes() for name in NAMES}
    for fraction in (0.05, 0.3, 0.6):
        cache = tmp_path / f"cache-{fraction}"
        built = build_tokens(corpus, cache, val_fraction=fraction)
        folder = token_folder(cache)
        train = np.fromfile(folder / "train.bin", dtype=np.uint16)
        val = np.fromfile(folder / "val.bin", dtype=np.uint16)
        assert (folder / "train.bin").stat().st_size == 2 * train.size  # uint16 tokens, nothing else
        # Whole files: val.bin is some files' bytes end to end (in name order), train.bin the others'.
        order = sorted(NAMES)
        splits = [held for held in itertools.product((False, True), repeat=len(order))
                  if bytes(val.astype(np.uint8)) == b"".join(data[n] for n, h in zip(order, held) if h)
                  and bytes(train.astype(np.uint8)) == b"".join(data[n] for n, h in zip(order, held) if not h)]
        assert len(splits) == 1 and 0 < sum(splits[0]) < len(order), fraction
        assert train.max() < 256 and val.dtype == np.uint16
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["files"] == {"train": len(order) - sum(splits[0]), "val": sum(splits[0])}
        assert (meta["train_tokens"], meta["val_tokens"], meta["vocab_size"]) == (train.size, val.size, 256)
        assert built["train"].num_tokens == train.size and built["val"].num_tokens == val.size
        if fraction == 0.05:  # the split the end-to-end runs below rely on
            assert bytes(val.astype(np.uint8)) == data["doc10.txt"]


def test_token_build_is_deterministic_cached_and_keyed_by_the_files(corpus, tmp_path):
    first = build_tokens(corpus, tmp_path / "a")
    folder = token_folder(tmp_path / "a")
    stamps = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    again = build_tokens(corpus, tmp_path / "a", seq_len=8)  # seq_len does not change the token files
    assert [p.name for p in (tmp_path / "a").iterdir()] == [folder.name]  # the same folder, reused
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == stamps
    assert again["train"].path == first["train"].path and again["train"].seq_len == 8
    other = build_tokens(corpus, tmp_path / "b")  # another machine's cache: the same folder name and bytes
    assert token_folder(tmp_path / "b").name == folder.name
    for name in ("train.bin", "val.bin", "meta.json"):
        assert (token_folder(tmp_path / "b") / name).read_bytes() == (folder / name).read_bytes(), name
    assert other["train"].corpus_baselines == first["train"].corpus_baselines
    changed = tmp_path / "changed"
    changed.mkdir()
    for name in NAMES:
        (changed / name).write_bytes((corpus / name).read_bytes())
    build_tokens(changed, tmp_path / "c")
    (changed / "doc0.txt").write_bytes(b"edited " + (corpus / "doc0.txt").read_bytes())
    build_tokens(changed, tmp_path / "c")
    assert len([p for p in (tmp_path / "c").iterdir() if p.name.startswith("tokens-")]) == 2  # edited: rebuilt


def reference_entropies(seq) -> tuple:
    """Plug-in unigram entropy and conditional bigram entropy H(next | previous), in nats, by counting."""
    seq = [int(t) for t in seq]
    unigram = Counter(seq)
    h1 = -sum(c / len(seq) * math.log(c / len(seq)) for c in unigram.values())
    pairs = Counter(itertools.pairwise(seq))
    prev = Counter(seq[:-1])
    n = len(seq) - 1
    h2 = -sum(c / n * math.log(c / prev[a]) for (a, _), c in pairs.items())
    return h1, h2


def test_entropies_equal_a_direct_count():
    rng = np.random.default_rng(0)
    markov = [0]
    for _ in range(999):  # a Markov chain over 12 tokens: bigram entropy well below the unigram one
        markov.append(int(rng.choice([(markov[-1] + 1) % 12, (markov[-1] * 7) % 12, int(rng.integers(12))])))
    for seq in (np.asarray(markov, dtype=np.uint16), rng.integers(0, 256, 3000).astype(np.uint16)):
        got = entropies(seq)
        h1, h2 = reference_entropies(seq)
        assert got["unigram"] == pytest.approx(h1, rel=1e-12) and got["bigram"] == pytest.approx(h2, rel=1e-12)
        assert got["uniform"] == pytest.approx(math.log(256))
    # by hand: a period of 4 distinct tokens is log 4 per token alone, and fully predictable from the last one
    periodic = entropies(np.array([3, 200, 17, 255] * 50, dtype=np.uint16))
    assert periodic["unigram"] == pytest.approx(math.log(4)) and periodic["bigram"] == pytest.approx(0.0, abs=1e-12)
    # 0 1 0 1 1: p(0)=2/5; after 0 always 1, after 1 half 0 half 1 -> bigram = 2/4 * log 2
    small = entropies(np.array([0, 1, 0, 1, 1], dtype=np.uint16))
    assert small["unigram"] == pytest.approx(-(0.4 * math.log(0.4) + 0.6 * math.log(0.6)))
    assert small["bigram"] == pytest.approx(0.5 * math.log(2))


# ------------------------------------------------------------------ windows
def test_training_windows_are_shifted_pairs_read_in_one_gather(corpus, tmp_path):
    train = build_tokens(corpus, tmp_path)["train"]
    stream = np.fromfile(train.path, dtype=np.uint16).astype(np.int64)
    assert isinstance(train, TokenWindows) and train.vocab_size == 256 and train.seq_len == SEQ
    assert len(train) == len(stream) - SEQ  # every start with SEQ + 1 tokens after it
    starts = [0, 5, 100, len(train) - 1]
    x, y = train.read_batch(starts)
    assert x.dtype == y.dtype == torch.int64 and x.shape == y.shape == (4, SEQ)
    for row, s in enumerate(starts):
        assert x[row].tolist() == stream[s:s + SEQ].tolist()
        assert y[row].tolist() == stream[s + 1:s + SEQ + 1].tolist()  # the next token of every position
        xi, yi = train[s]
        assert torch.equal(xi, x[row]) and torch.equal(yi, y[row])


def test_epoch_indices_are_a_function_of_seed_and_epoch(corpus, tmp_path):
    train = build_tokens(corpus, tmp_path, windows_per_epoch=50)["train"]
    assert train.epoch_length == 50
    e0 = torch.as_tensor(train.epoch_indices(0, 0))
    assert torch.equal(e0, torch.as_tensor(train.epoch_indices(0, 0)))
    assert len(e0) == 50 and int(e0.min()) >= 0 and int(e0.max()) < len(train)
    assert not torch.equal(e0, torch.as_tensor(train.epoch_indices(0, 1)))  # a new draw each epoch
    assert not torch.equal(e0, torch.as_tensor(train.epoch_indices(1, 0)))  # and per seed
    assert len(set(e0.tolist())) > 40  # spread over the ~3,000 starts, not a constant


def test_held_out_chunks_cover_the_val_split_without_overlap(corpus, tmp_path):
    val = build_tokens(corpus, tmp_path)["val"]
    stream = np.fromfile(val.path, dtype=np.uint16).astype(np.int64)
    assert isinstance(val, TokenChunks) and len(val) == (len(stream) - 1) // SEQ >= 20
    x, y = val.read_batch(np.arange(len(val)))
    assert x.shape == (len(val), SEQ) and x.dtype == torch.int64
    assert x.flatten().tolist() == stream[:len(val) * SEQ].tolist()  # consecutive, non-overlapping
    assert y.flatten().tolist() == stream[1:len(val) * SEQ + 1].tolist()
    assert all(torch.equal(val[i][0], x[i]) for i in (0, len(val) - 1))


def test_bad_token_settings_are_clear_data_errors(corpus, tmp_path):
    with pytest.raises(DataError, match=r"holds \d+ tokens, fewer than dataset.seq_len=100000 \+ 2; lower dataset.seq_len"):
        build_tokens(corpus, tmp_path, seq_len=100_000)
    with pytest.raises(DataError, match=r"dataset.files='.*\*\.md' matches no file"):
        tokens(files=str(corpus / "*.md"), cache_root=tmp_path)
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "doc0.txt").write_bytes(text_of(0))
    with pytest.raises(DataError, match="give no held-out file; add files or change dataset.val_fraction"):
        tokens(files=str(tmp_path / "one" / "*.txt"), cache_root=tmp_path)
    with pytest.raises(ConfigError, match="dataset.seq_len and dataset.windows_per_epoch must be >= 1"):
        make_settings(["task=lm", "dataset=tokens", "model=gpt_tiny", "dataset.seq_len=0"])


def test_mmap_and_default_loaders_read_the_same_windows(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("FASTPIPE_CACHE", str(tmp_path))
    loaders = {}
    for data in ("default", "mmap"):
        s = make_settings(lm_overrides(corpus, f"data={data}", "dataset.windows_per_epoch=40"))
        splits = build_dataset(s.dataset, cpu_runtime(), "tokens")
        loaders[data] = [build_loader(s.data, splits, cpu_runtime(), 8, s.seed, train, False) for train in (True, False)]
    assert "the dataset's own memory map" in loaders["mmap"][0].describe()
    assert not (tmp_path / "packs").exists()  # nothing packed: the token file is the map
    held = [list(ld[1]) for ld in loaders.values()]
    assert len(held[0]) == len(held[1]) == -(-len(splits.val) // 8) >= 5  # every held-out window, once
    for (xa, ya), (xb, yb) in zip(*held):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    for epoch in (0, 1):  # each epoch's batches hold the same windows (mmap reads each batch in order)
        for ld in loaders.values():
            ld[0].set_epoch(epoch)
        batches = [list(ld[0]) for ld in loaders.values()]
        assert len(batches[0]) == len(batches[1]) == 5
        for (xa, _), (xb, _) in zip(*batches):
            assert sorted(map(tuple, xa.tolist())) == sorted(map(tuple, xb.tolist()))
