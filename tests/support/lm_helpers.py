"""The small corpora and GPT helpers the language-modelling tests share (tests/unit/data/test_tokens.py,
tests/unit/models/test_gpt.py, tests/unit/train/test_graph.py, tests/integration/test_lm.py and test_fsdp.py)."""
from __future__ import annotations

from pathlib import Path

SEQ = 16
# doc10.txt is the held-out file at dataset=tokens' val_fraction (0.05); the others train.
NAMES = ("doc0.txt", "doc1.txt", "doc2.txt", "doc10.txt")
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "while", "a", "small", "cat",
         "sleeps", "on", "the", "warm", "mat"]


def text_of(k: int, lines: int = 12, more_per_file: int = 4, end: str = ".") -> bytes:
    """A learnable, distinct text per file: ``lines + more_per_file * k`` numbered lines of shifted word
    sequences, each ending in ``end``."""
    text = [f"{k}.{i}: " + " ".join(WORDS[(i + j) % len(WORDS)] for j in range(6)) + end
            for i in range(lines + more_per_file * k)]
    return ("\n".join(text) + "\n").encode()


def write_corpus(folder: Path) -> Path:
    """Four small text files in ``folder`` (1.7 KB of training text, 0.8 KB held out)."""
    for k, name in enumerate(NAMES):
        (folder / name).write_bytes(text_of(k))
    return folder


def glob_of(corpus: Path) -> str:
    return str(corpus / "*.txt")


def corpus_glob(folder: Path) -> str:
    """A larger corpus of the same four files in ``folder`` (40-64 lines each, no full stops); its glob."""
    folder.mkdir(parents=True, exist_ok=True)
    for k, name in enumerate(NAMES):
        (folder / name).write_bytes(text_of(k, lines=40, more_per_file=8, end=""))
    return glob_of(folder)


def lm_overrides(corpus, *extra):
    """A tiny LM run: a 1-layer gpt_tiny over the small corpus, 16 steps per epoch, 3 epochs."""
    loader = [] if "data=mmap" in extra else ["data.num_workers=0"]  # a data=default key
    return ["task=lm", "dataset=tokens", f"dataset.files={glob_of(corpus)}", f"dataset.seq_len={SEQ}",
            "dataset.windows_per_epoch=128", "model=gpt_tiny", "model.n_layer=1", "train.batch_size=8",
            "measure.warmup_steps=2", "measure.window=3", "runtime.progress=false", *loader, *extra]


def gpt_params(vocab: int, seq_len: int, n_layer: int, n_embd: int) -> tuple:
    """(all parameters, N without the position embedding) of a bias-free GPT, counted by hand."""
    block = 2 * n_embd + 3 * n_embd * n_embd + n_embd * n_embd + 8 * n_embd * n_embd  # 2 LN, qkv, proj, MLP
    n = vocab * n_embd + n_layer * block + n_embd  # the head is tied to wte: counted once
    return n + seq_len * n_embd, n
