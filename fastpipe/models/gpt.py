"""A small GPT (nanoGPT's shape): token + position embeddings, pre-LayerNorm blocks of causal
self-attention (``F.scaled_dot_product_attention``: flash attention where available) and a GELU
MLP, a final LayerNorm and a language-model head tied to the token embedding."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float, bias: bool) -> None:
        super().__init__()
        self.n_head, self.dropout = n_head, dropout
        self.qkv = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.proj = nn.Linear(n_embd, n_embd, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_head, c // self.n_head).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """One transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, n_embd: int, n_head: int, dropout: float, bias: bool) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd, bias=bias)
        self.attn = SelfAttention(n_embd, n_head, dropout, bias)
        self.ln2 = nn.LayerNorm(n_embd, bias=bias)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd, bias=bias), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd, bias=bias), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """``GPT(vocab_size, seq_len, n_layer, n_head, n_embd)``: logits (B x T x vocab_size) for tokens (B x T).

    ``vocab_size`` and ``seq_len`` come from the dataset unless the config sets them (``seq_len`` is the
    longest sequence the position embedding covers). GPT-2 small: 12 layers, 12 heads, 768 wide.
    """

    def __init__(self, vocab_size: int, seq_len: int = 1024, n_layer: int = 12, n_head: int = 12,
                 n_embd: int = 768, dropout: float = 0.0, bias: bool = False) -> None:
        super().__init__()
        if n_embd % n_head:
            raise ValueError(f"n_embd={n_embd} must be a multiple of n_head={n_head}")
        self.vocab_size, self.seq_len, self.n_layer, self.n_head, self.n_embd = vocab_size, seq_len, n_layer, n_head, n_embd
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(seq_len, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, dropout, bias) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, bias=bias)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one matrix for the input and output embeddings
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """GPT-2's initialisation: N(0, 0.02) weights, zero biases, unit LayerNorms, residual projections
        scaled down by depth. Also run by launcher=fsdp on the shards of a model built on the meta device."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.LayerNorm):
                module.reset_parameters()
        for name, p in self.named_parameters():
            if name.endswith(("attn.proj.weight", "mlp.2.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * self.n_layer))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        if t > self.seq_len:
            raise ValueError(f"a sequence of {t} tokens is longer than the model's seq_len={self.seq_len}")
        x = self.drop(self.wte(tokens) + self.wpe(torch.arange(t, device=tokens.device)))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    def flops_per_sample(self, tokens: torch.Tensor) -> float:
        """Training FLOPs (forward + backward) of one sequence of ``tokens.shape[-1]`` tokens, counted as
        nanoGPT counts them: 6N per token for the N non-embedding-lookup parameters (the tied head's
        matrix counts once), plus the attention term 12 * n_layer * n_embd * T per token (PaLM, appendix B)."""
        t = tokens.shape[-1]
        n = sum(p.numel() for p in self.parameters()) - self.wpe.weight.numel()
        return float(t * (6 * n + 12 * self.n_layer * self.n_embd * t))
