"""A small GPT trained twice from the same seed: with octattn's attention (forward and
backward through torch.ops.octattn.attention) and with PyTorch's
scaled_dot_product_attention. Prints both loss curves and their largest difference.

    python3 train_gpt.py [--steps 200] [--layers 2] [--threads N]

The attention layer has the shape of the write-up's CausalSelfAttention: q, k and v
projections (grouped queries: fewer kv heads than query heads), a causal mask
(optionally a sliding window), no dropout, an output projection. The data is random
text from a fixed Markov chain, so that the loss has something to learn.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import octattn.ops  # noqa: F401  (registers torch.ops.octattn.attention)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_heads, n_kv_heads, window, backend):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.window = n_heads, n_kv_heads, window
        self.head_dim = n_embd // n_heads
        self.q = nn.Linear(n_embd, n_heads * self.head_dim, bias=False)
        self.kv = nn.Linear(n_embd, 2 * n_kv_heads * self.head_dim, bias=False)
        self.proj = nn.Linear(n_embd, n_embd, bias=False)
        self.backend = backend

    def forward(self, x):
        B, T, C = x.shape
        q = self.q(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(B, T, 2, self.n_kv_heads, self.head_dim).unbind(dim=2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        if self.backend == "octattn":  # strided views, read in place; GQA without copies
            y, _ = torch.ops.octattn.attention(q, k, v, causal=True, window=self.window)
        elif self.backend == "ring":  # x holds this rank's tokens of a sequence (zigzag)
            import octattn.distributed
            y = octattn.distributed.ring_attention(q, k, v, causal=True, window=self.window)
        else:
            mask = None
            if self.window:
                i = torch.arange(T).unsqueeze(1)
                j = torch.arange(T).unsqueeze(0)
                mask = (i - j >= 0) & (i - j < self.window)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None,
                                               enable_gqa=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd, n_heads, n_kv_heads, window, backend):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_heads, n_kv_heads, window, backend)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, block, n_embd, n_heads, n_kv_heads, layers, window, backend):
        super().__init__()
        self.tok = nn.Embedding(vocab, n_embd)
        self.pos = nn.Embedding(block, n_embd)
        self.blocks = nn.ModuleList(
            [Block(n_embd, n_heads, n_kv_heads, window, backend) for _ in range(layers)])
        self.ln = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx, targets, pos=None, reduction="mean"):
        """The loss; pos: the tokens' positions (default 0, 1, ...: a rank's positions
        where its tokens are a shard of the sequence)."""
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]) if pos is None else pos)
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1),
                               reduction=reduction)


def markov_text(vocab, length, seed):
    """Tokens of a random Markov chain with a few likely successors per token."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(vocab, vocab, generator=g) * 3.0
    probs = torch.softmax(logits, dim=-1)
    out = torch.empty(length, dtype=torch.long)
    out[0] = 0
    for t in range(1, length):
        out[t] = torch.multinomial(probs[out[t - 1]], 1, generator=g)
    return out


def train(backend, steps=200, layers=2, n_embd=64, n_heads=4, n_kv_heads=2, block=64,
          batch=8, vocab=48, window=0, seed=1234):
    """The loss of every step of a training run with `backend` ("octattn" or "sdpa")."""
    data = markov_text(vocab, 20000, seed)
    torch.manual_seed(seed)
    model = GPT(vocab, block, n_embd, n_heads, n_kv_heads, layers, window, backend)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed + 1)
    losses = []
    for _ in range(steps):
        starts = torch.randint(0, len(data) - block - 1, (batch,), generator=g)
        x = torch.stack([data[s:s + block] for s in starts])
        y = torch.stack([data[s + 1:s + block + 1] for s in starts])
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--window", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    ours = train("octattn", a.steps, a.layers, window=a.window)
    theirs = train("sdpa", a.steps, a.layers, window=a.window)
    for s in range(0, a.steps, max(1, a.steps // 20)):
        print(f"step {s:4d}  octattn {ours[s]:.5f}  sdpa {theirs[s]:.5f}")
    diff = max(abs(x - y) for x, y in zip(ours, theirs))
    print(f"first loss {ours[0]:.5f} (log vocab {math.log(48):.5f}), last {ours[-1]:.5f} / "
          f"{theirs[-1]:.5f}; largest difference {diff:.2e}")


if __name__ == "__main__":
    main()
