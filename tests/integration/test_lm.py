"""Whole language-modelling runs: in this process (tokens, mmap, amp, synthetic, resume), under DDP, a sweep."""
from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from fastpipe.data.tokens import entropies

from conftest import in_process, run_in_process, run_sweep
from lm_helpers import NAMES, SEQ, gpt_params, lm_overrides, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A folder of four small text files (1.7 KB of training text, 0.8 KB held out)."""
    return write_corpus(tmp_path_factory.mktemp("corpus"))


# ------------------------------------------------------------------ whole runs (slow)
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


def test_lm_run_through_mmap_reads_the_token_map(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("FASTPIPE_CACHE", str(tmp_path / "cache"))
    m = run_in_process(tmp_path / "run", lm_overrides(corpus, "data=mmap", "data.num_threads=1"))
    assert m["status"] == "ok" and m["choices"]["data"] == "mmap" and m["steps"] == 48
    assert set(m["val_metrics"]) == {"loss", "perplexity"} and math.isfinite(m["val_metrics"]["loss"])
    assert m["primary_metric"]["name"] == "loss" and m["tokens_per_s"] == pytest.approx(m["throughput"] * SEQ)
    assert "data=mmap  the dataset's own memory map" in (tmp_path / "run" / "graph.txt").read_text()
    assert not (tmp_path / "cache" / "packs").exists()


def test_synthetic_tokens_train_the_lm_and_report_no_held_out_metrics(tmp_path):
    m = run_in_process(tmp_path, ["task=lm", "dataset=synthetic", "dataset.vocab_size=64", f"dataset.seq_len={SEQ}",
                                  "dataset.num_images=64", "model=gpt_tiny", "model.n_layer=1", "train.batch_size=8",
                                  "train.max_steps=8", "measure.warmup_steps=2", "measure.window=3",
                                  "runtime.progress=false"])
    assert m["status"] == "ok" and m["steps"] == 8 and math.isfinite(m["final_loss"])
    assert m["val_metrics"] is None and m["primary_metric"] is None and m["corpus_baselines"] is None
    assert m["tokens_per_s"] == pytest.approx(m["throughput"] * SEQ)
    assert "vocab_size=64  seq_len=16" in (tmp_path / "graph.txt").read_text()


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


def test_ddp_lm_run_through_the_cli(corpus, tmp_path):
    proc = in_process(["launcher=ddp", *lm_overrides(corpus), f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["status"] == "ok" and m["env"]["world_size"] == 2
    assert m["steps"] == 24  # 128 windows per epoch split over 2 ranks: 8 steps of 8 each, 3 epochs
    val = m["val_metrics"]
    assert set(val) == {"loss", "perplexity"} and val["perplexity"] == pytest.approx(math.exp(val["loss"]))
    assert m["primary_metric"]["name"] == "loss" and m["tokens_per_s"] == pytest.approx(m["throughput"] * SEQ)
    assert "DistributedDataParallel" in (tmp_path / "graph.txt").read_text()


def test_precision_sweep_on_the_lm_judges_parity_by_loss_lower_is_better(corpus, tmp_path):
    """fp32 and amp over the LM: parity by the loss, lower is better; the amp job trains in bf16 autocast."""
    sweep = tmp_path / "sweep"
    proc = run_sweep(sweep, ["precision=fp32,amp", *lm_overrides(corpus, "train.max_steps=12"),
                             "launcher.fresh_process=false"])
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
    amp = jobs[1]  # the LM under amp trains with a finite loss, better than guessing, in bf16 too
    assert amp["choices"]["precision"] == "amp" and math.isfinite(amp["final_loss"])
    assert math.isfinite(amp["val_metrics"]["loss"]) and amp["val_metrics"]["loss"] < math.log(256)
    assert "bf16 autocast" in (sweep / "1" / "graph.txt").read_text()
