"""``dataset=tokens``: a token stream for language modelling, nanoGPT-style (a uint16 memmap per split).

Built once into the cache from a text corpus: by default the installed Python standard library's
own top-level ``.py`` files (on every machine that has Python), or ``files=GLOB``. Tokens are bytes
(vocabulary 256): no tokenizer to download. Whole files go to one split, chosen by a hash of the
file name. Training samples are random windows of ``seq_len`` tokens (an epoch is
``windows_per_epoch`` of them); held-out samples are the consecutive windows of the val split.
"""
from __future__ import annotations

import glob
import hashlib
import json
import math
import os
import shutil
import sysconfig
import zlib
from pathlib import Path
from typing import List, Optional

import numpy as np
import torch
from torch.utils.data import Dataset

from fastpipe.data.cachedir import remove_dead_tmp, tmp_sibling, writing_into
from fastpipe.errors import ConfigError, DataError

FORMAT = 1  # bump when the token files change, so cached folders are not reused
VOCAB = 256  # byte-level tokens


def corpus_files(files: Optional[str]) -> List[Path]:
    """The corpus, in a fixed order: ``files`` (a glob, ``~`` expanded, ``**`` allowed), or the standard
    library's top-level modules (no site-packages, no test folders: they are not top-level)."""
    if files:
        found = sorted(Path(p) for p in glob.glob(os.path.expanduser(files), recursive=True) if Path(p).is_file())
        if not found:
            raise DataError(f"dataset.files={files!r} matches no file; give a glob of text files, e.g. "
                            "'~/corpus/**/*.txt'")
        return found
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in stdlib.glob("*.py") if p.is_file())


def entropies(tokens: np.ndarray) -> dict:
    """The corpus's own unigram and bigram (next token given the previous one) entropies, in nats
    per token, and the uniform one: a model below the bigram entropy uses more than one token of context."""
    counts = np.bincount(tokens, minlength=VOCAB).astype(np.float64)
    p = counts / counts.sum()
    unigram = float(-(p[p > 0] * np.log(p[p > 0])).sum())
    pairs = np.bincount(tokens[:-1].astype(np.int64) * VOCAB + tokens[1:], minlength=VOCAB * VOCAB)
    pairs = pairs.reshape(VOCAB, VOCAB).astype(np.float64)
    joint = pairs / pairs.sum()
    cond = pairs / np.maximum(pairs.sum(1, keepdims=True), 1)
    seen = pairs > 0
    bigram = float(-(joint[seen] * np.log(cond[seen])).sum())
    return {"unigram": unigram, "bigram": bigram, "uniform": math.log(VOCAB)}


def _key(paths: List[Path], val_fraction: float) -> str:
    h = hashlib.blake2b(digest_size=8)
    h.update(json.dumps([FORMAT, val_fraction]).encode())
    for p in paths:
        st = p.stat()
        h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _held_out(path: Path, fraction: float) -> bool:
    return zlib.crc32(path.name.encode()) % 10_000 < fraction * 10_000


def build_token_files(paths: List[Path], folder: Path, val_fraction: float, progress: bool = False) -> dict:
    """Write ``folder/{train,val}.bin`` (uint16) and ``meta.json`` once; returns the metadata."""
    meta_path = folder / "meta.json"
    remove_dead_tmp(folder)
    if meta_path.is_file():
        return json.loads(meta_path.read_text())
    splits = {"train": [], "val": []}
    for p in paths:
        splits["val" if _held_out(p, val_fraction) else "train"].append(p)
    if not splits["val"] or not splits["train"]:
        raise DataError(f"{len(paths)} corpus file(s) give no {'held-out' if not splits['val'] else 'training'} "
                        "file; add files or change dataset.val_fraction (whole files go to one split)")
    # The corpus is read first: an unreadable text file is not a cache problem.
    tokens = {name: np.frombuffer(b"".join(p.read_bytes() for p in files), dtype=np.uint8).astype(np.uint16)
              for name, files in splits.items()}
    meta = {"format": FORMAT, "vocab_size": VOCAB, "files": {k: len(v) for k, v in splits.items()},
            **{f"{name}_tokens": int(data.size) for name, data in tokens.items()},
            "corpus_baselines": entropies(np.concatenate([tokens["train"], tokens["val"]]))}
    tmp = tmp_sibling(folder)
    with writing_into(folder.parent):
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for name, data in tokens.items():
            data.tofile(tmp / f"{name}.bin")
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
        try:
            os.rename(tmp, folder)  # atomic: the folder appears complete or not at all
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)  # another process finished first
            if not meta_path.is_file():
                raise
    return json.loads(meta_path.read_text())


class _TokenFile(Dataset):
    """A uint16 token file, memory-mapped lazily (each DataLoader worker maps it itself)."""

    vocab_size = VOCAB

    def __init__(self, path: Path, seq_len: int, baselines: dict) -> None:
        self.path, self.seq_len, self.corpus_baselines = Path(path), seq_len, baselines
        self._tokens: Optional[np.ndarray] = None
        self.num_tokens = self.path.stat().st_size // 2
        if self.num_tokens < seq_len + 2:
            raise DataError(f"{self.path} holds {self.num_tokens} tokens, fewer than dataset.seq_len={seq_len} + 2; "
                            "lower dataset.seq_len or add text")

    @property
    def tokens(self) -> np.ndarray:
        if self._tokens is None:
            self._tokens = np.memmap(self.path, dtype=np.uint16, mode="r")
        return self._tokens

    def __getstate__(self):
        return {**self.__dict__, "_tokens": None}  # a memmap is re-opened, not pickled

    def starts(self, indices) -> np.ndarray:
        raise NotImplementedError

    def read_batch(self, indices) -> tuple:
        """One gather for a whole batch: (inputs, targets), int64 B x seq_len (data=mmap reads this)."""
        offsets = self.starts(np.asarray(indices, dtype=np.int64))[:, None] + np.arange(self.seq_len + 1)
        window = torch.from_numpy(self.tokens[offsets].astype(np.int64))
        return window[:, :-1], window[:, 1:]

    def __getitem__(self, index: int):
        x, y = self.read_batch([index])
        return x[0], y[0]


class TokenWindows(_TokenFile):
    """Training windows: sample ``i`` starts at token ``i``; each epoch draws ``windows_per_epoch`` random starts."""

    def __init__(self, path: Path, seq_len: int, windows_per_epoch: int, baselines: dict) -> None:
        super().__init__(path, seq_len, baselines)
        self.epoch_length = windows_per_epoch

    def __len__(self) -> int:
        return self.num_tokens - self.seq_len  # every start with seq_len + 1 tokens after it

    def starts(self, indices: np.ndarray) -> np.ndarray:
        return indices

    def epoch_indices(self, seed: int, epoch: int) -> torch.Tensor:
        """This epoch's window starts: uniform with replacement (nanoGPT's get_batch), a function of (seed, epoch)."""
        g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        return torch.randint(0, len(self), (self.epoch_length,), generator=g)


class TokenChunks(_TokenFile):
    """Held-out windows: the consecutive, non-overlapping ``seq_len`` windows of the split."""

    def __len__(self) -> int:
        return (self.num_tokens - 1) // self.seq_len

    def starts(self, indices: np.ndarray) -> np.ndarray:
        return indices * self.seq_len


def tokens(files: Optional[str] = None, seq_len: int = 64, windows_per_epoch: int = 10240,
           val_fraction: float = 0.05, cache_root: Optional[Path] = None, progress: bool = False) -> dict:
    """Byte-level token windows of a text corpus (see the module docstring)."""
    paths = corpus_files(files)
    if cache_root is None:
        raise ConfigError("dataset=tokens builds its token files into fastpipe's cache; run it through fastpipe")
    folder = Path(cache_root) / f"tokens-{_key(paths, val_fraction)}"
    meta = build_token_files(paths, folder, val_fraction, progress)
    baselines = meta["corpus_baselines"]
    return {"train": TokenWindows(folder / "train.bin", seq_len, windows_per_epoch, baselines),
            "val": TokenChunks(folder / "val.bin", seq_len, baselines)}


def _check(params: dict) -> None:
    if params.get("seq_len", 64) < 1 or params.get("windows_per_epoch", 10240) < 1:
        raise ConfigError("dataset.seq_len and dataset.windows_per_epoch must be >= 1")


tokens.sample_kind = "tokens"
tokens.data_format = "tokens"  # which loaders read it: config/registry.py
tokens.check_config = _check
