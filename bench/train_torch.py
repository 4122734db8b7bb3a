#!/usr/bin/env python3
"""One PyTorch training step (forward + backward + AdamW) of the Llama-2 model okapi trains, for
bench/train_compare.sh. The model is llama2.c's model.py: RMSNorm, interleaved-pair RoPE, causal
attention (GQA), SwiGLU FFN, tied embeddings; fp32; AdamW(betas 0.9/0.95, weight decay 0.1) with
global-norm clipping at 1.0, as `okapi train` does. Tokens are random ids (speed does not depend
on them). Prints one line: "torch: ... tok/s".

Installs nothing: when torch is missing it says so and exits with status 2.
"""
import argparse
import math
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("torch: not installed (Debian: apt-get install python3-torch); no PyTorch numbers", file=sys.stderr)
    sys.exit(2)

SHAPES = {  # dim, hidden, layers, heads, kv heads (llama2.c's stories models)
    "stories260K": (64, 172, 5, 8, 4),
    "stories15M": (288, 768, 6, 6, 6),
    "stories42M": (512, 1376, 8, 8, 8),
    "stories110M": (768, 2048, 12, 12, 12),
}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim, seq, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(seq).float(), freqs)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):  # x: [B, T, H, D], rotating adjacent pairs (2i, 2i+1)
    xr, xi = x.float().reshape(*x.shape[:-1], -1, 2).unbind(-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack([xr * cos - xi * sin, xr * sin + xi * cos], dim=-1).flatten(3)


class Block(nn.Module):
    def __init__(self, dim, hidden, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.wq = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, dim, bias=False)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.attn_norm, self.ffn_norm = RMSNorm(dim), RMSNorm(dim)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(b, t, self.heads, self.head_dim)
        k = self.wk(h).view(b, t, self.kv_heads, self.head_dim)
        v = self.wv(h).view(b, t, self.kv_heads, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.heads // self.kv_heads
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim) + mask
        attn = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, -1)
        x = x + self.wo(attn)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Transformer(nn.Module):
    def __init__(self, vocab, dim, hidden, layers, heads, kv_heads, seq):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, hidden, heads, kv_heads) for _ in range(layers))
        self.norm = RMSNorm(dim)
        cos, sin = rope_tables(dim // heads, seq)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)
        self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1))

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, self.cos, self.sin, self.mask)
        logits = self.norm(x) @ self.embed.weight.t()  # tied classifier
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="stories15M", choices=sorted(SHAPES))
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    dim, hidden, layers, heads, kv_heads = SHAPES[a.config]
    model = Transformer(a.vocab, dim, hidden, layers, heads, kv_heads, a.seq)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=5e-4, betas=(0.9, 0.95), eps=1e-8)
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    step()  # warm-up
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    seconds = time.perf_counter() - t0
    n_params = sum(p.numel() for p in model.parameters())
    rate = a.steps * a.batch * a.seq / seconds
    print(f"torch {torch.__version__}: {a.config}, vocab {a.vocab}, {n_params} params, batch {a.batch} x seq {a.seq}, "
          f"{a.threads} threads: {rate:.1f} tok/s ({1e3 * seconds / a.steps:.2f} ms/step)")


if __name__ == "__main__":
    main()
