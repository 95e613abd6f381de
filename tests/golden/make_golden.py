"""Writes tests/golden/golden.txt: attention outputs from PyTorch on seeded inputs.

Run with PyTorch 2.x installed: python3 tests/golden/make_golden.py
Each case stores q, k, v ([B, H, T, D], row-major) and PyTorch's output o. Masks are
built as explicit boolean tensors from the reference model's attention_mask(), so the
fixture checks the library's mask formula against an independent construction. The
modifier cases (softcap, ALiBi, sinks, chunks, bias and mask tensors) are built with
explicit torch operations and store their options on lines of their own. The padded
batch cases run scaled_dot_product_attention on a batch whose sequences are padded, as
a Hugging Face model pads them, with an explicit boolean mask built from the lengths; the
library gets the lengths (kv_starts, kv_lens) instead of the mask. The bf16 and f16
cases store PyTorch's own 16-bit scaled_dot_product_attention (o16) next to the float64
one on the same 16-bit values (o).
"""
import math
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


def modified_attention(q, k, v, allowed, softcap=0.0, slopes=None, sinks=None, bias=None):
    """The modifiers with explicit torch operations: softcap with torch.tanh, ALiBi and the
    bias as an additive mask, the boolean mask with masked_fill, sinks as an extra logit
    column dropped after the softmax. Bottom-right aligned positions."""
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    tq, tk = q.shape[2], k.shape[2]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        qpos = torch.arange(tq, dtype=s.dtype).view(tq, 1) + (tk - tq)
        kpos = torch.arange(tk, dtype=s.dtype).view(1, tk)
        s = s + slopes.view(1, -1, 1, 1) * (kpos - qpos)
    if bias is not None:
        s = s + bias
    s = s.masked_fill(~allowed, float("-inf"))
    if sinks is not None:
        column = sinks.view(1, -1, 1, 1).expand(s.shape[0], -1, tq, 1)
        p = torch.softmax(torch.cat([s, column], dim=-1), dim=-1)[..., :tk]
    else:
        p = torch.softmax(s, dim=-1)
    p = torch.nan_to_num(p, nan=0.0)  # rows with nothing allowed: zeros
    return p @ v


def chunk_mask(tq, tk, chunk):
    qpos = torch.arange(tq).view(tq, 1) + (tk - tq)
    kpos = torch.arange(tk).view(1, tk)
    return (qpos // chunk == kpos // chunk).view(1, 1, tq, tk)


def causal_mask(tq, tk, window=0):
    qpos = torch.arange(tq).view(tq, 1) + (tk - tq)
    kpos = torch.arange(tk).view(1, tk)
    allowed = kpos <= qpos
    if window:
        allowed = allowed & (qpos - kpos < window)
    return allowed.view(1, 1, tq, tk)


def modifier_cases():
    """Cases with score modifiers: (name, b, hq, hkv, tq, tk, d, options, q, k, v, o)."""
    out = []
    f32 = lambda *ts: [t.to(torch.float32) for t in ts]

    q, k, v = f32(*projected_qkv(1, 16, 4, 2, 8))
    q = q * 4  # scores well past the cap
    allowed = causal_mask(16, 16)
    o = modified_attention(q.double(), k.double(), v.double(), allowed, softcap=2.0)
    out.append(("softcap", {"softcap": 2.0}, q, k, v, o))

    q, k, v = f32(*projected_qkv(1, 16, 4, 4, 8))
    slopes = torch.tensor([2.0 ** (-8 * (h + 1) / 4) for h in range(4)])
    o = modified_attention(q.double(), k.double(), v.double(), causal_mask(16, 16),
                           slopes=slopes.double())
    out.append(("alibi", {"slopes": slopes}, q, k, v, o))

    q, k, v = f32(*projected_qkv(2, 16, 4, 2, 8))
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0])
    o = modified_attention(q.double(), k.double(), v.double(), causal_mask(16, 16, window=4),
                           sinks=sinks.double())
    out.append(("sinks_window", {"sinks": sinks, "window": 4}, q, k, v, o))

    q, k, v = f32(*projected_qkv(1, 16, 2, 2, 8))
    o = modified_attention(q.double(), k.double(), v.double(),
                           causal_mask(16, 16) & chunk_mask(16, 16, 5))
    out.append(("chunked", {"chunk": 5}, q, k, v, o))

    q, k, v = f32(*projected_qkv(2, 16, 4, 2, 8))
    bias = torch.randn(2, 4, 16, 16).to(torch.float32)
    mask = torch.rand(2, 4, 16, 16) > 0.3
    mask = mask | torch.eye(16, dtype=torch.bool).view(1, 1, 16, 16)
    o = modified_attention(q.double(), k.double(), v.double(), causal_mask(16, 16) & mask,
                           bias=bias.double())
    out.append(("bias_mask", {"bias": bias, "mask": mask}, q, k, v, o))

    # Everything at once on a decode tail: 3 queries against 12 keys, GQA 2.
    q, k, v = f32(*projected_qkv(1, 12, 4, 2, 8))
    q = q[:, :, 9:, :].contiguous() * 3
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])
    sinks = torch.tensor([1.0, 0.0, -0.5, 3.0])
    bias = torch.randn(1, 4, 3, 12).to(torch.float32)
    mask = torch.rand(1, 4, 3, 12) > 0.2
    allowed = causal_mask(3, 12) & chunk_mask(3, 12, 6) & mask
    o = modified_attention(q.double(), k.double(), v.double(), allowed, softcap=1.5,
                           slopes=slopes.double(), sinks=sinks.double(), bias=bias.double())
    out.append(("all_decode", {"softcap": 1.5, "slopes": slopes, "sinks": sinks, "chunk": 6,
                               "bias": bias, "mask": mask}, q, k, v, o))
    return out


def padded_cases():
    """Padded batches: (name, options, q, k, v, o); o from SDPA with a boolean mask."""
    out = []
    f32 = lambda *ts: [t.to(torch.float32) for t in ts]

    # Left padding (a batch of prompts): sequence b's tokens are rows pads[b].. of 12.
    # Query i of sequence b is at position i - pads[b], key j at j - pads[b]: the mask is
    # causal within the valid rows. Padded query rows read nothing: SDPA gives NaN there,
    # the library zeros, so they are stored as zeros.
    t, pads = 12, [0, 5, 9]
    q, k, v = f32(*projected_qkv(3, t, 4, 2, 8))
    rows = torch.arange(t).view(t, 1)
    cols = torch.arange(t).view(1, t)
    allowed = torch.stack([(cols >= p) & (cols <= rows) for p in pads]).view(3, 1, t, t)
    o = torch.nan_to_num(attend(q.double(), k.double(), v.double(), allowed), nan=0.0)
    out.append(("padded_left", {"kv_starts": pads, "kv_lens": [t - p for p in pads]}, q, k, v, o))

    # A decode step on a static cache of 12 rows (right padding): one new query per
    # sequence at position lens[b] - 1, reading keys 0 .. lens[b] - 1.
    lens = [12, 7, 1]
    q, k, v = f32(*projected_qkv(3, t, 4, 2, 8))
    q = q[:, :, :1, :].contiguous()
    allowed = torch.stack([cols < n for n in lens]).view(3, 1, 1, t)
    o = attend(q.double(), k.double(), v.double(), allowed)
    out.append(("padded_decode", {"kv_lens": lens}, q, k, v, o))
    return out


def dtype_cases():
    """16-bit inputs: (name, dtype, q, k, v, o from float64, o16 from PyTorch's kernel)."""
    out = []
    for dtype, name in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
        for tq, tk in ((40, 40), (1, 300)):
            q, k, v = projected_qkv(1, tk, 4, 2, 32)
            q = q[:, :, tk - tq:, :].contiguous()
            q, k, v = (t.to(dtype) for t in (q, k, v))
            mask = causal_mask(tq, tk)
            o16 = attend(q, k, v, mask)
            o = attend(q.double(), k.double(), v.double(), mask)
            out.append((f"{name}_{'prefill' if tq > 1 else 'decode'}", name, q, k, v, o, o16))
    return out


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
        # The option lines of a case: numbers, int lists, then float tensors.
        for name, opts, q, k, v, o in modifier_cases() + padded_cases():
            b, hq, tq, d = q.shape
            _, hkv, tk, _ = k.shape
            f.write(f"case {name} {b} {hq} {hkv} {tq} {tk} {d} {opts.get('window', 0)} 0\n")
            for key in ("softcap", "chunk"):
                if key in opts:
                    f.write(f"{key} {opts[key]}\n")
            for key in ("kv_starts", "kv_lens"):
                if key in opts:
                    f.write(key + " " + " ".join(str(x) for x in opts[key]) + "\n")
            for key in ("slopes", "sinks", "bias", "mask"):
                if key in opts:
                    values = opts[key].to(torch.float32).flatten().tolist()
                    f.write(key + " " + " ".join(f"{x:.9e}" for x in values) + "\n")
            for label, t in (("q", q), ("k", k), ("v", v), ("o", o.float())):
                f.write(label + " " + " ".join(f"{x:.9e}" for x in t.flatten().tolist()) + "\n")
        for name, dtype, q, k, v, o, o16 in dtype_cases():
            b, hq, tq, d = q.shape
            _, hkv, tk, _ = k.shape
            f.write(f"case {name} {b} {hq} {hkv} {tq} {tk} {d} 0 0\n")
            f.write(f"dtype {dtype}\n")
            for label, t in (("q", q), ("k", k), ("v", v), ("o", o), ("o16", o16)):
                values = t.to(torch.float32).flatten().tolist()
                f.write(label + " " + " ".join(f"{x:.9e}" for x in values) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
