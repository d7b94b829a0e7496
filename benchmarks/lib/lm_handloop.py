"""The language-modelling reference: a hand-written nanoGPT-style loop for fastpipe's GPT.

fastpipe.models.GPT itself (same class, same init) at GPT-2 small's shape by default, on a few
distinct random token batches already on the device (as fastpipe's dataset=synthetic makes them),
bf16 autocast, fused AdamW as nanoGPT configures it (lr 6e-4, betas 0.9/0.95, weight decay 0.1 on
matrices only: fastpipe's train.no_decay=auto does the same), torch.compile optional, cross-entropy
over the B*T tokens. Warm-up steps are excluded; the device is synchronised at the edges of each
window of --window steps (as fastpipe measures), so the step time is a median over windows. Prints
one JSON line: tokens_per_s, step_ms_median, mfu (GPT.flops_per_sample over fastpipe.measure.flops'
peak for the device), peak_mem_gb (max allocated after warm-up), ...

    python benchmarks/lib/lm_handloop.py --batch 32 --compile default          # GPT-2 small on a GPU
    python benchmarks/lib/lm_handloop.py --device cpu --smoke                  # a tiny GPT on the CPU
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # fastpipe from this checkout
from fastpipe.measure.flops import peak_tflops  # noqa: E402
from fastpipe.models import GPT  # noqa: E402

DISTINCT = 4  # distinct batches, round-robin: no cache effects from one repeated tensor (as fastpipe)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=32, help="sequences per step")
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--compile", default="default", choices=["off", "default", "reduce-overhead", "max-autotune"])
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--warmup", type=int, default=15, help="steps excluded (compilation, autotuning)")
    p.add_argument("--steps", type=int, default=100, help="measured steps")
    p.add_argument("--window", type=int, default=10, help="steps between synchronisations")
    p.add_argument("--device", default="cuda")
    p.add_argument("--smoke", action="store_true", help="a tiny GPT (4 x 4 x 128, vocabulary 256, 32 tokens), "
                   "eager, a few steps: checks the script")
    a = p.parse_args(argv)
    if a.smoke:
        a.batch, a.seq_len, a.vocab, a.layers, a.heads, a.width = 4, 32, 256, 4, 4, 128
        a.compile, a.warmup, a.steps, a.window = "off", 2, 4, 2
    return a


def nanogpt_adamw(model: torch.nn.Module, lr: float, fused: bool) -> torch.optim.AdamW:
    """Decay on matrices and embeddings, none on biases and norm weights (nanoGPT's configure_optimizers)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=fused)


def main(argv=None) -> None:
    a = parse_args(argv)
    device = torch.device(a.device)
    torch.manual_seed(0)
    raw = GPT(vocab_size=a.vocab, seq_len=a.seq_len, n_layer=a.layers, n_head=a.heads, n_embd=a.width).to(device)
    opt = nanogpt_adamw(raw, a.lr, fused=device.type == "cuda")
    model = raw if a.compile == "off" else torch.compile(raw, mode=None if a.compile == "default" else a.compile)
    seqs = [torch.randint(0, a.vocab, (a.batch, a.seq_len + 1), device=device) for _ in range(DISTINCT)]
    batches = [(s[:, :-1].contiguous(), s[:, 1:].contiguous()) for s in seqs]  # targets: inputs shifted by one
    dtype = torch.bfloat16 if a.dtype == "bf16" else None

    def step(i: int) -> torch.Tensor:
        x, y = batches[i % DISTINCT]
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    for i in range(a.warmup):
        step(i)
    sync()
    warmup_s = time.perf_counter() - t0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)  # peak after warm-up, as fastpipe reports it
    window_ms, seconds, i = [], 0.0, a.warmup
    while i < a.warmup + a.steps:
        n = min(a.window, a.warmup + a.steps - i)
        t0 = time.perf_counter()
        for _ in range(n):
            loss = step(i)
            i += 1
        sync()
        dt = time.perf_counter() - t0
        seconds += dt
        if n == a.window or not window_ms:  # a short last window only when it is the only one
            window_ms.append(1000 * dt / n)
    samples_per_s = a.batch * a.steps / seconds
    flops = raw.flops_per_sample(batches[0][0][:1])
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    kind = "tensor" if dtype is not None else ("tf32" if torch.backends.cuda.matmul.allow_tf32 else "fp32")
    peak = peak_tflops(name, kind) if device.type == "cuda" else None
    print(json.dumps({
        "runner": "hand", "tokens_per_s": samples_per_s * a.seq_len, "throughput": samples_per_s,
        "step_ms_median": statistics.median(window_ms), "mfu": flops * samples_per_s / (peak * 1e12) if peak else None,
        "peak_mem_gb": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        "warmup_s": warmup_s, "flops_per_sample": flops, "peak_tflops": peak, "batch": a.batch,
        "seq_len": a.seq_len, "vocab": a.vocab, "shape": [a.layers, a.heads, a.width], "compile": a.compile,
        "dtype": a.dtype, "steps": a.steps, "final_loss": loss.item(), "device": name, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
