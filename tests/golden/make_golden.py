"""Writes tests/golden/golden.txt: attention outputs from PyTorch on seeded inputs.

Run with PyTorch 2.x installed: python3 tests/golden/make_golden.py
Each case stores q, k, v ([B, H, T, D], row-major) and PyTorch's output o. Masks are
built as explicit boolean tensors from the reference model's attention_mask(), so the
fixture checks the library's mask formula against an independent construction.
"""
import pathlib

import torch
import torch.nn.functional as F


def attention_mask(length, window, stride, device=None):
    """Causal mask, optionally narrowed to a sliding window with strided global columns."""
    rows = torch.arange(length, device=device).unsqueeze(1)
    columns = torch.arange(length, device=device).unsqueeze(0)
    distance = rows - columns
    allowed = distance >= 0
    if window:
        local = distance < window
        if stride:
            local = local | (columns % stride == 0)
        allowed = allowed & local
    return allowed.view(1, 1, length, length)


def projected_qkv(batch, tokens, q_heads, kv_heads, dim):
    """q, k, v as a decoder layer makes them: one linear projection, split into heads."""
    channels = q_heads * dim
    x = torch.randn(batch, tokens, channels, dtype=torch.float64)
    proj = torch.nn.Linear(channels, (q_heads + 2 * kv_heads) * dim, dtype=torch.float64)
    qkv = proj(x)
    q, k, v = qkv.split([q_heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    heads = lambda t, h: t.view(batch, tokens, h, dim).transpose(1, 2).contiguous()
    return heads(q, q_heads), heads(k, kv_heads), heads(v, kv_heads)


def attend(q, k, v, mask):
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def main():
    torch.manual_seed(0)
    cases = []
    # The write-up's walkthrough: B=1, T=8, C=16, two heads of width 8.
    q, k, v = projected_qkv(1, 8, 2, 2, 8)
    cases.append(("walkthrough", 0, 0, q, k, v, attention_mask(8, 0, 0)))
    # Grouped queries: 4 query heads over 2 kv heads.
    q, k, v = projected_qkv(1, 8, 4, 2, 8)
    cases.append(("gqa", 0, 0, q, k, v, attention_mask(8, 0, 0)))
    # Sliding window 4 with global columns every 3 tokens.
    q, k, v = projected_qkv(2, 16, 2, 1, 8)
    cases.append(("window_stride", 4, 3, q, k, v, attention_mask(16, 4, 3)))
    # Three new queries against ten cached keys (bottom-right alignment).
    q, k, v = projected_qkv(1, 10, 2, 2, 8)
    q = q[:, :, 7:, :].contiguous()
    mask = attention_mask(10, 0, 0)[:, :, 7:, :]
    cases.append(("decode_tail", 0, 0, q, k, v, mask))

    out = pathlib.Path(__file__).with_name("golden.txt")
    with out.open("w") as f:
        f.write(f"# PyTorch {torch.__version__.split('+')[0]} scaled_dot_product_attention in float64 on float32 inputs\n")
        for name, window, stride, q, k, v, mask in cases:
            # The library sees float32 inputs: o is computed in float64 from those.
            q, k, v = (t.to(torch.float32) for t in (q, k, v))
            o = attend(q.double(), k.double(), v.double(), mask).float()
            b, hq, tq, d = q.shape
            _, hkv, tk, _ = k.shape
            f.write(f"case {name} {b} {hq} {hkv} {tq} {tk} {d} {window} {stride}\n")
            for label, t in (("q", q), ("k", k), ("v", v), ("o", o)):
                f.write(label + " " + " ".join(f"{x:.9e}" for x in t.flatten().tolist()) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
