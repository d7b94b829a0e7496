"""Language modelling: dataset=tokens (token files, windows), task=lm, the GPT model, the config
checks that refuse bad combinations, and whole LM runs (in process, DDP, resume, sweep)."""
from __future__ import annotations

import csv
import itertools
import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import REPO, TINY, cpu_runtime, make_settings, run_cli, run_in_process

from fastpipe.data import build_loader
from fastpipe.data.splits import build_dataset
from fastpipe.data.tokens import TokenChunks, TokenWindows, entropies, tokens
from fastpipe.errors import ConfigError, DataError
from fastpipe.models import GPT, build_model
from fastpipe.stages.tasks import LanguageModelling

SEQ = 16
# doc10.txt is the held-out file at dataset=tokens' val_fraction (0.05); the others train.
NAMES = ("doc0.txt", "doc1.txt", "doc2.txt", "doc10.txt")
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "while", "a", "small", "cat",
         "sleeps", "on", "the", "warm", "mat"]


def text_of(k: int) -> bytes:
    """A learnable, distinct text per file: numbered lines of shifted word sequences."""
    lines = [f"{k}.{i}: " + " ".join(WORDS[(i + j) % len(WORDS)] for j in range(6)) + "." for i in range(12 + 4 * k)]
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """One intra-op thread: on a shared 2-core machine OpenMP's spinning threads cost 50x per step here."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A folder of four small text files (1.7 KB of training text, 0.8 KB held out)."""
    folder = tmp_path_factory.mktemp("corpus")
    for k, name in enumerate(NAMES):
        (folder / name).write_bytes(text_of(k))
    return folder


def glob_of(corpus: Path) -> str:
    return str(corpus / "*.txt")


def build_tokens(corpus, cache, **kwargs):
    kwargs = {"seq_len": SEQ, "windows_per_epoch": 32, "val_fraction": 0.05, **kwargs}
    return tokens(files=glob_of(corpus), cache_root=cache, **kwargs)


def token_folder(cache: Path) -> Path:
    (folder,) = [p for p in cache.iterdir() if p.name.startswith("tokens-")]
    return folder


def lm_overrides(corpus, *extra):
    """A tiny LM run: a 1-layer gpt_tiny over the small corpus, 16 steps per epoch, 3 epochs."""
    loader = [] if "data=mmap" in extra else ["data.num_workers=0"]  # a data=default key
    return ["task=lm", "dataset=tokens", f"dataset.files={glob_of(corpus)}", f"dataset.seq_len={SEQ}",
            "dataset.windows_per_epoch=128", "model=gpt_tiny", "model.n_layer=1", "train.batch_size=8",
            "measure.warmup_steps=2", "measure.window=3", "runtime.progress=false", *loader, *extra]


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


# ------------------------------------------------------------------ task and model
def test_language_modelling_loss_metrics_and_perplexity():
    task = LanguageModelling()
    assert (task.primary, task.higher_is_better, task.dataset_kinds) == ("loss", False, ("tokens",))
    g = torch.Generator().manual_seed(0)
    logits, target = torch.randn(3, 5, 11, generator=g), torch.randint(0, 11, (3, 5), generator=g)
    expected = F.cross_entropy(logits.reshape(15, 11), target.reshape(15))
    assert torch.allclose(task.loss(logits, target), expected, atol=1e-6)
    per_token = -torch.log_softmax(logits.double(), -1).gather(-1, target[..., None]).squeeze(-1)
    sums = task.metrics(logits, target)
    assert set(sums) == {"loss"} and sums["loss"].dim() == 0
    assert float(sums["loss"]) / 3 == pytest.approx(float(per_token.mean()), rel=1e-5)  # equal lengths: per token
    means = {"loss": float(sums["loss"]) / 3}
    assert task.summarize(means)["perplexity"] == pytest.approx(math.exp(means["loss"]), rel=1e-12)
    assert task.summarize({"loss": 1e6})["perplexity"] > 1e300  # huge, not an OverflowError
    assert task.tokens(target) == 5


def gpt_params(vocab: int, seq_len: int, n_layer: int, n_embd: int) -> tuple:
    """(all parameters, N without the position embedding) of a bias-free GPT, counted by hand."""
    block = 2 * n_embd + 3 * n_embd * n_embd + n_embd * n_embd + 8 * n_embd * n_embd  # 2 LN, qkv, proj, MLP
    n = vocab * n_embd + n_layer * block + n_embd  # the head is tied to wte: counted once
    return n + seq_len * n_embd, n


def test_gpt_shapes_tied_head_flops_and_length_limit():
    torch.manual_seed(0)
    model = GPT(vocab_size=37, seq_len=12, n_layer=2, n_head=2, n_embd=16)
    tokens_in = torch.randint(0, 37, (3, 9))
    assert model(tokens_in).shape == (3, 9, 37)
    assert model.lm_head.weight is model.wte.weight
    total, n = gpt_params(37, 12, 2, 16)
    assert sum(p.numel() for p in model.parameters()) == total
    for t in (9, 12):  # per token 6N + 12 * n_layer * n_embd * T, times T tokens
        assert model.flops_per_sample(torch.zeros(2, t, dtype=torch.long)) == t * (6 * n + 12 * 2 * 16 * t)
    with pytest.raises(ValueError, match="a sequence of 13 tokens is longer than the model's seq_len=12"):
        model(torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(ValueError, match="must be a multiple of n_head"):
        GPT(vocab_size=37, n_head=3, n_embd=16)


def test_gpt2_small_config_has_124m_parameters():
    s = make_settings(["task=lm", "dataset=synthetic", "dataset.vocab_size=50304", "dataset.seq_len=1024",
                       "model=gpt2_small"])
    with torch.device("meta"):  # 124M parameters, no memory
        model = build_model(s.model, {"vocab_size": 50304, "seq_len": 1024})
    assert (model.n_layer, model.n_head, model.n_embd, model.seq_len) == (12, 12, 768, 1024)
    count = sum(p.numel() for p in model.parameters())
    assert count == gpt_params(50304, 1024, 12, 768)[0] == 124_373_760 and round(count / 1e6) == 124


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


def test_gpt_on_an_image_dataset_says_it_needs_a_vocabulary(monkeypatch):
    from fastpipe.train import graph

    s = make_settings(TINY + ["model=gpt"])  # task=classification: the settings are fine, the model is not
    with pytest.raises(ConfigError, match=r"model=\w+ needs vocab_size, which the dataset does not give; .*"
                                          r"set model.vocab_size=N"):
        graph.build(s, cpu_runtime())


# ------------------------------------------------------------------ whole runs (slow)
@pytest.mark.slow
def test_lm_run_records_loss_perplexity_tokens_and_corpus_baselines(corpus, tmp_path):
    m = run_in_process(tmp_path, lm_overrides(corpus))
    assert m["status"] == "ok" and m["task"] == "LanguageModelling" and m["steps"] == 48
    val = m["val_metrics"]
    assert set(val) == {"loss", "perplexity"} and val["perplexity"] == pytest.approx(math.exp(val["loss"]))
    assert m["primary_metric"] == {"name": "loss", "value": val["loss"], "higher_is_better": False}
    assert m["val_loss"] == val["loss"] and m["accuracy"] is None
    assert m["tokens_per_s"] == pytest.approx(m["throughput"] * SEQ, rel=1e-12)
    stream = np.concatenate([np.frombuffer((corpus / n).read_bytes(), np.uint8) for n in sorted(NAMES)
                             if n != "doc10.txt"] + [np.frombuffer((corpus / "doc10.txt").read_bytes(), np.uint8)])
    expected = entropies(stream.astype(np.uint16))  # train then val, as the token files hold them
    assert m["corpus_baselines"] == pytest.approx(expected) and set(expected) == {"unigram", "bigram", "uniform"}
    assert val["loss"] < expected["unigram"]  # it learned more than token frequencies
    assert m["flops_method"] == "GPT.flops_per_sample"
    assert m["flops_per_sample"] == SEQ * (6 * gpt_params(256, SEQ, 1, 128)[1] + 12 * 1 * 128 * SEQ)
    graph = (tmp_path / "graph.txt").read_text()
    assert "LanguageModelling  primary metric: loss (lower is better)" in graph
    assert f"input=int64[{SEQ}]  target=int64[{SEQ}]" in graph


@pytest.mark.slow
def test_lm_run_through_mmap_reads_the_token_map(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("FASTPIPE_CACHE", str(tmp_path / "cache"))
    m = run_in_process(tmp_path / "run", lm_overrides(corpus, "data=mmap", "data.num_threads=1"))
    assert m["status"] == "ok" and m["choices"]["data"] == "mmap" and m["steps"] == 48
    assert set(m["val_metrics"]) == {"loss", "perplexity"} and math.isfinite(m["val_metrics"]["loss"])
    assert m["primary_metric"]["name"] == "loss" and m["tokens_per_s"] == pytest.approx(m["throughput"] * SEQ)
    assert "data=mmap  the dataset's own memory map" in (tmp_path / "run" / "graph.txt").read_text()
    assert not (tmp_path / "cache" / "packs").exists()


@pytest.mark.slow
def test_lm_run_under_amp_trains_with_finite_loss(corpus, tmp_path):
    m = run_in_process(tmp_path, lm_overrides(corpus, "precision=amp", "train.max_steps=12"))
    assert m["status"] == "ok" and m["choices"]["precision"] == "amp"
    assert math.isfinite(m["final_loss"]) and math.isfinite(m["val_metrics"]["loss"])
    assert m["val_metrics"]["loss"] < math.log(256)  # better than guessing, in bf16 too
    assert "bf16 autocast" in (tmp_path / "graph.txt").read_text()


@pytest.mark.slow
def test_synthetic_tokens_train_the_lm_and_report_no_held_out_metrics(tmp_path):
    m = run_in_process(tmp_path, ["task=lm", "dataset=synthetic", "dataset.vocab_size=64", f"dataset.seq_len={SEQ}",
                                  "dataset.num_images=64", "model=gpt_tiny", "model.n_layer=1", "train.batch_size=8",
                                  "train.max_steps=8", "measure.warmup_steps=2", "measure.window=3",
                                  "runtime.progress=false"])
    assert m["status"] == "ok" and m["steps"] == 8 and math.isfinite(m["final_loss"])
    assert m["val_metrics"] is None and m["primary_metric"] is None and m["corpus_baselines"] is None
    assert m["tokens_per_s"] == pytest.approx(m["throughput"] * SEQ)
    assert "vocab_size=64  seq_len=16" in (tmp_path / "graph.txt").read_text()


@pytest.mark.slow
def test_checkpoint_and_resume_continue_the_lm_run_exactly(corpus, tmp_path):
    base = lm_overrides(corpus, "train.checkpoint_every=3", "lr_schedule=constant")
    straight = run_in_process(tmp_path / "straight", base + ["train.max_steps=20"])
    first = run_in_process(tmp_path / "resumed", base + ["train.max_steps=10"])
    assert first["steps"] == 10 and (tmp_path / "resumed" / "checkpoints" / "step-00000010.pt").is_file()
    resumed = run_in_process(tmp_path / "resumed", base + ["train.max_steps=20", "train.resume=auto"])
    assert any("resuming from" in w and "at step 10" in w for w in resumed["warnings"])
    assert resumed["status"] == "ok" and resumed["steps"] == straight["steps"] == 20
    for key in ("final_loss", "val_loss"):  # mid-epoch 1: the same windows, the same weights
        assert abs(resumed[key] - straight[key]) <= 1e-6, key
    assert resumed["val_metrics"]["perplexity"] == pytest.approx(straight["val_metrics"]["perplexity"], abs=1e-5)


@pytest.mark.slow
def test_ddp_lm_run_through_the_cli(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    proc = run_cli(["launcher=ddp", *lm_overrides(corpus), f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["status"] == "ok" and m["env"]["world_size"] == 2
    assert m["steps"] == 24  # 128 windows per epoch split over 2 ranks: 8 steps of 8 each, 3 epochs
    val = m["val_metrics"]
    assert set(val) == {"loss", "perplexity"} and val["perplexity"] == pytest.approx(math.exp(val["loss"]))
    assert m["primary_metric"]["name"] == "loss" and m["tokens_per_s"] == pytest.approx(m["throughput"] * SEQ)
    assert "DistributedDataParallel" in (tmp_path / "graph.txt").read_text()


@pytest.mark.slow
def test_precision_sweep_on_the_lm_judges_parity_by_loss_lower_is_better(corpus, tmp_path):
    sweep = tmp_path / "sweep"
    proc = subprocess.run([sys.executable, "-m", "fastpipe", "-m", "precision=fp32,amp",
                           *lm_overrides(corpus, "train.max_steps=12"), f"hydra.sweep.dir={sweep}"],
                          cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    md = (sweep / "report.md").read_text()
    assert "- parity: the primary held-out metric (loss, lower is better)" in md
    with open(sweep / "report.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 and {r["status"] for r in rows} == {"ok"} and {r["metric"] for r in rows} == {"loss"}
    assert {r["precision"] for r in rows} == {"fp32", "amp"}
    jobs = [json.loads((sweep / str(n) / "metrics.json").read_text()) for n in (0, 1)]
    base = next(r for r in rows if r["baseline"] == "True")
    assert base["precision"] == "fp32" and float(base["metric_value"]) == pytest.approx(jobs[0]["val_loss"])
