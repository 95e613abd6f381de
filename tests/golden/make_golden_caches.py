"""Writes tests/golden/caches.txt: PyTorch's attention over quantized caches, MLA's absorbed
math and key lists, on seeded inputs.

Run with PyTorch 2.x installed: python3 tests/golden/make_golden_caches.py
Each cache is quantized by PyTorch (torch.int8 codes with absmax scales,
torch.float8_e4m3fn and torch.float8_e5m2 codes, ggml's q8_0 and q4_0 blocks and DeepSeek
V3.2's 656-byte fp8 latent rows assembled from PyTorch's views of their parts) and
dequantized by PyTorch; o is computed in float64 from those values, as explicit torch
operations: the absorbed MLA scores as the latent and rope products added, the key lists
as the listed rows gathered (a set per row, past the causal bound dropped) before the
softmax. The file holds each tensor's bytes as they lie in memory (little-endian,
row-major, in hex) with its dtype and logical shape [B, H, T, D], so the library reads
exactly what PyTorch wrote, and `bound`: the header's accuracy bound, max|v| * (5e-7 *
max(1, S) + 1e-8 * C) over the allowed pairs of the dequantized values.
"""
import math
import pathlib

import torch

GEN = torch.Generator().manual_seed(20261205)


def randn(*shape):
    return torch.randn(*shape, generator=GEN, dtype=torch.float64)


def keys_with_outliers(*shape):
    """Normal values with a few channels 10-50x larger, as trained models' keys have."""
    x = randn(*shape)
    d = shape[-1]
    for c, f in ((3, 20.0), (d // 2 + 1, 50.0), (d - 5, 10.0)):
        x[..., c] *= f
    return x.to(torch.float32)


def int8_quantize(x, group, rows=1):
    """Absmax int8 over blocks of `rows` tokens by `group` channels: codes, f32 scales."""
    b, h, t, d = x.shape
    blocks = x.view(b, h, t // rows, rows, d // group, group)
    s = blocks.abs().amax(dim=(3, 5)) / 127.0  # [b, h, t / rows, d / group]
    s = torch.where(s == 0, torch.ones_like(s), s).to(torch.float32)
    full = s.repeat_interleave(rows, dim=2).repeat_interleave(group, dim=3)
    codes = torch.round(x / full).clamp(-127, 127).to(torch.int8)
    return codes, s


def int8_dequantize(codes, s, group, rows=1):
    full = s.repeat_interleave(rows, dim=2).repeat_interleave(group, dim=3)
    return codes.to(torch.float32) * full


def q8_0_blocks(x):
    """ggml's block_q8_0 rows: per 32 values an f16 d = absmax / 127 and 32 int8 codes."""
    b, h, t, d = x.shape
    blocks = x.view(b, h, t, d // 32, 32)
    dd = (blocks.abs().amax(dim=-1, keepdim=True) / 127.0).to(torch.float16)
    inv = torch.where(dd == 0, torch.zeros_like(dd, dtype=torch.float32), 1.0 / dd.to(torch.float32))
    q = torch.round(blocks * inv).clamp(-127, 127).to(torch.int8)
    raw = torch.cat([dd.view(torch.uint8), q.view(torch.uint8)], dim=-1)  # 34 bytes
    values = dd.to(torch.float32) * q.to(torch.float32)
    return raw.contiguous(), values.view(b, h, t, d)


def q4_0_blocks(x):
    """ggml's block_q4_0 rows: per 32 values an f16 d (the value of largest magnitude over
    -8) and 16 bytes, value i the low nibble of byte i and value 16 + i its high nibble,
    each nibble - 8 times d."""
    b, h, t, d = x.shape
    blocks = x.view(b, h, t, d // 32, 32)
    idx = blocks.abs().argmax(dim=-1, keepdim=True)
    dd = (torch.gather(blocks, -1, idx) / -8.0).to(torch.float16)
    inv = torch.where(dd == 0, torch.zeros_like(dd, dtype=torch.float32), 1.0 / dd.to(torch.float32))
    nib = torch.clamp(torch.floor(blocks * inv + 8.5), 0, 15).to(torch.uint8)
    packed = nib[..., :16] | (nib[..., 16:] << 4)
    raw = torch.cat([dd.view(torch.uint8), packed], dim=-1)  # 18 bytes
    values = dd.to(torch.float32) * (nib.to(torch.float32) - 8.0)
    return raw.contiguous(), values.view(b, h, t, d)


def ds_mla_rows(latent):
    """DeepSeek V3.2's fp8 latent rows from [B, 1, T, 576] values: 512 e4m3fn codes, four
    f32 scales (max|x| / 448 per 128), 64 bf16 rope values; and the rows' values."""
    nope, rope = latent[..., :512], latent[..., 512:]
    groups = nope.reshape(*nope.shape[:-1], 4, 128)
    s = (groups.abs().amax(dim=-1, keepdim=True) / 448.0).to(torch.float32)
    codes = (groups / s).to(torch.float8_e4m3fn)
    rope16 = rope.to(torch.bfloat16)
    raw = torch.cat([codes.reshape(*nope.shape).view(torch.uint8),
                     s.reshape(*s.shape[:-2], 4).contiguous().view(torch.uint8),
                     rope16.view(torch.uint8)], dim=-1)
    assert raw.shape[-1] == 656
    values = torch.cat([(codes.to(torch.float32) * s).reshape(*nope.shape),
                        rope16.to(torch.float32)], dim=-1)
    return raw.contiguous(), values


def allowed_causal(tq, tk):
    qpos = torch.arange(tq).view(tq, 1) + (tk - tq)
    return (torch.arange(tk).view(1, tk) <= qpos).view(1, 1, tq, tk)


def attention64(q, k, v, allowed, scale):
    """softmax(scale * q k^T) v in float64 with GQA, over the allowed pairs."""
    group = q.shape[1] // k.shape[1]
    k = k.double().repeat_interleave(group, dim=1)
    v = v.double().repeat_interleave(group, dim=1)
    s = (q.double() @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~allowed, float("-inf"))
    p = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)
    return p @ v


def bound(q, k, v, allowed, scale):
    """The header's accuracy bound over the allowed pairs (tests/README.md)."""
    group = q.shape[1] // k.shape[1]
    k = k.double().repeat_interleave(group, dim=1)
    prod = q.double().unsqueeze(-2) * k.unsqueeze(-3)  # [b, h, tq, tk, d]
    s = (prod.sum(-1) * scale).abs().masked_fill(~allowed, 0).amax().item()
    c = (prod.abs().sum(-1) * abs(scale)).masked_fill(~allowed, 0).amax().item()
    return v.double().abs().amax().item() * (5e-7 * max(1.0, s) + 1e-8 * c)


class Case:
    def __init__(self, name):
        self.name, self.lines = name, []

    def tensor(self, label, dtype, shape, raw):
        data = raw.contiguous().view(torch.uint8).flatten().numpy().tobytes().hex()
        self.lines.append(f"tensor {label} {dtype} {' '.join(str(x) for x in shape)} {data}")

    def f32(self, label, t):
        self.tensor(label, "f32", t.shape, t.to(torch.float32))

    def view(self, label, of, last):
        self.lines.append(f"view {label} {of} {last}")

    def option(self, key, value):
        self.lines.append(f"{key} {value}")

    def text(self):
        return "\n".join([f"case {self.name}"] + self.lines) + "\n"


def finish(case, q, k, v, allowed, scale, o=None):
    case.option("scale", float.hex(scale))
    case.option("bound", float.hex(bound(q, k, v, allowed, scale)))
    case.f32("o", attention64(q, k, v, allowed, scale) if o is None else o)
    return case


def scaled_case(name, dtype, q, kc, vc, ks, vs, kd, vd, options=()):
    """A case of a scaled cache: q, the codes and scales, o on the dequantized kd, vd."""
    c = Case(name)
    c.f32("q", q)
    c.tensor("k", dtype, kc.shape, kc)
    c.tensor("v", dtype, vc.shape, vc)
    c.f32("k_scale", ks)
    c.f32("v_scale", vs)
    for key, value in options:
        c.option(key, value)
    tq, tk = q.shape[2], kc.shape[2]
    return finish(c, q, kd, vd, allowed_causal(tq, tk), 1 / math.sqrt(q.shape[3]))


def problem(b, hq, hkv, tq, tk, d):
    q = randn(b, hq, tq, d).to(torch.float32)
    return q, keys_with_outliers(b, hkv, tk, d), randn(b, hkv, tk, d).to(torch.float32)


def int8_cases():
    # A decode step of two sequences, scales per token and group of 32 channels.
    q, k, v = problem(2, 8, 2, 1, 150, 64)
    (kc, ks), (vc, vs) = int8_quantize(k, 32), int8_quantize(v, 32)
    a = scaled_case("int8_decode", "int8", q, kc, vc, ks, vs, int8_dequantize(kc, ks, 32),
                    int8_dequantize(vc, vs, 32))
    # KIVI: keys by channel within blocks of 16 tokens, values by token; a chunk of 48
    # queries after a cached prefix of 64.
    q, k, v = problem(1, 4, 2, 48, 112, 64)
    (kc, ks), (vc, vs) = int8_quantize(k, 1, rows=16), int8_quantize(v, 64)
    b = scaled_case("int8_kivi_prefill", "int8", q, kc, vc, ks, vs,
                    int8_dequantize(kc, ks, 1, rows=16), int8_dequantize(vc, vs, 64),
                    (("k_scale_rows", 16),))
    return [a, b]


def fp8_cases():
    # vLLM's convention: one scale per kv head, k_scale folded into the scores.
    q, k, v = problem(1, 8, 4, 1, 130, 128)
    ks = (k.abs().amax(dim=(0, 2, 3), keepdim=True) / 448.0).to(torch.float32)
    vs = (v.abs().amax(dim=(0, 2, 3), keepdim=True) / 448.0).to(torch.float32)
    kc, vc = (k / ks).to(torch.float8_e4m3fn), (v / vs).to(torch.float8_e4m3fn)
    a = scaled_case("fp8_e4m3_decode", "fp8_e4m3", q, kc, vc, ks, vs,
                    kc.to(torch.float32) * ks, vc.to(torch.float32) * vs)
    # One scale per tensor; a prefill over the whole cache.
    q, k, v = problem(2, 4, 2, 40, 40, 64)
    ks = (k.abs().amax() / 57344.0 * 64).to(torch.float32).view(1, 1, 1, 1)
    vs = (v.abs().amax() / 57344.0 * 64).to(torch.float32).view(1, 1, 1, 1)
    kc, vc = (k / ks).to(torch.float8_e5m2), (v / vs).to(torch.float8_e5m2)
    b = scaled_case("fp8_e5m2_prefill", "fp8_e5m2", q, kc, vc, ks, vs,
                    kc.to(torch.float32) * ks, vc.to(torch.float32) * vs)
    return [a, b]


def ggml_cases():
    out = []
    for name, blocks in (("q8_0_decode", q8_0_blocks), ("q4_0_decode", q4_0_blocks)):
        q, k, v = problem(1, 8, 2, 2, 130, 128)
        (kr, kv), (vr, vv) = blocks(k), blocks(v)
        c = Case(name)
        c.f32("q", q)
        dtype = name.split("_decode")[0]
        c.tensor("k", dtype, k.shape, kr)
        c.tensor("v", dtype, v.shape, vr)
        out.append(finish(c, q, kv, vv, allowed_causal(2, 130), 1 / math.sqrt(128)))
    return out


def absorbed_q(q_nope, q_pe, w_uk):
    """DeepSeek's absorbed query: q_nope taken through W_UK into the latent space, then
    the rope part; the library's q is these rows in f32."""
    q_lat = torch.einsum("bhtn,hcn->bhtc", q_nope, w_uk)  # [b, h, t, 512]
    return torch.cat([q_lat, q_pe], dim=-1).to(torch.float32)


def absorbed_mla(q, latent, allowed, scale):
    """The absorbed attention as explicit matmuls in float64: scores = the latent product
    plus the rope product, o in the latent space (before W_UV)."""
    q, latent = q.double(), latent.double()
    c_kv, k_pe = latent[..., :512], latent[..., 512:]
    s = q[..., :512] @ c_kv.transpose(-1, -2) + q[..., 512:] @ k_pe.transpose(-1, -2)
    s = (s * scale).masked_fill(~allowed, float("-inf"))
    return torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0) @ c_kv


def mla_cases():
    out = []
    b, h, tq, tk = 1, 16, 2, 80
    scale = 1 / math.sqrt(128 + 64)  # the head dimension before absorption
    for name in ("mla_bf16_decode", "mla_fp8_ds_decode"):
        q = absorbed_q(randn(b, h, tq, 128), randn(b, h, tq, 64), randn(h, 512, 128) / math.sqrt(128))
        latent = randn(b, 1, tk, 576)
        latent[..., 512:] *= 2
        if name == "mla_bf16_decode":
            raw = latent.to(torch.bfloat16)
            values, dtype = raw.to(torch.float32), "bf16"
        else:
            raw, values = ds_mla_rows(latent)
            dtype = "fp8_ds_mla"
        allowed = allowed_causal(tq, tk)
        c = Case(name)
        c.f32("q", q)
        c.tensor("k", dtype, (b, 1, tk, 576), raw)
        c.view("v", "k", 512)
        out.append(finish(c, q, values, values[..., :512], allowed, scale,
                          absorbed_mla(q, values, allowed, scale)))
    return out


def listed_attention(q, k, v, lists, tk, scale):
    """Key lists by explicit gather: row i of head h reads the set of its lists' entries
    (-1 dropped, duplicates once) at or below its causal bound, gathered before the
    softmax. lists(b, g, i) gives the row's entries."""
    b, hq, tq, _ = q.shape
    group = hq // k.shape[1]
    o = torch.zeros(b, hq, tq, v.shape[-1], dtype=torch.float64)
    allowed = torch.zeros(b, hq, tq, tk, dtype=torch.bool)
    for e in range(b):
        for h in range(hq):
            for i in range(tq):
                bound_i = i + tk - tq
                sel = sorted({j for j in lists(e, h // group, i) if 0 <= j <= bound_i})
                if not sel:
                    continue
                idx = torch.tensor(sel)
                ks = k[e, h // group].double().index_select(0, idx)
                vs = v[e, h // group].double().index_select(0, idx)
                p = torch.softmax((ks @ q[e, h, i].double()) * scale, dim=0)
                o[e, h, i] = p @ vs
                allowed[e, h, i, idx] = True
    return o, allowed


def list_tensor(b, h, tq, n, tk, dup=True):
    """Unsorted indexer lists with duplicates, -1 padding and entries past the causal
    bound, and their counts."""
    idx = torch.full((b, h, tq, n), -1, dtype=torch.int32)
    cnt = torch.zeros(b, h, tq, 1, dtype=torch.int32)
    for e in range(b):
        for g in range(h):
            for i in range(tq):
                c = int(torch.randint(0, n + 1, (1,), generator=GEN))
                row = torch.randint(0, tk, (c,), generator=GEN, dtype=torch.int32)
                if dup and c > 2:
                    row[c - 1] = row[0]
                idx[e, g, i, :c] = row
                if c < n and i % 3 == 0:
                    idx[e, g, i, c] = int(torch.randint(0, tk, (1,), generator=GEN))  # past the count
                cnt[e, g, i, 0] = c
    return idx, cnt


def key_list_cases():
    out = []
    # A chunk of 24 queries at positions 76..99 of a cache of 100, GQA 2, one list per
    # token for every head (DeepSeek's indexer), joined with a local window of 8.
    b, hq, hkv, tq, tk, d = 1, 4, 2, 24, 100, 64
    q = randn(b, hq, tq, d).to(torch.float32)
    k, v = randn(b, hkv, tk, d).to(torch.float32), randn(b, hkv, tk, d).to(torch.float32)
    idx, cnt = list_tensor(1, 1, tq, 40, tk)
    win = torch.tensor([[i + tk - tq - w for w in range(8)] for i in range(tq)], dtype=torch.int32)
    win = torch.where(win >= 0, win, -1).view(1, 1, tq, 8)

    def rows(e, g, i):
        first = idx[0, 0, i, : cnt[0, 0, i, 0]].tolist()
        return first + win[0, 0, i].tolist()

    o, allowed = listed_attention(q, k, v, rows, tk, 1 / math.sqrt(d))
    c = Case("key_lists_prefill")
    c.f32("q", q)
    c.f32("k", k)
    c.f32("v", v)
    c.tensor("key_indices", "int32", idx.shape, idx)
    c.tensor("key_counts", "int32", cnt.shape, cnt)
    c.tensor("key_indices2", "int32", win.shape, win)
    out.append(finish(c, q, k, v, allowed, 1 / math.sqrt(d), o))

    # DeepSeek V3.2's sparse MLA decode: two query tokens over a cache of 160 fp8 latent
    # rows, each token's top-48 for all 16 heads.
    b, h, tq, tk = 1, 16, 2, 160
    scale = 1 / math.sqrt(192)
    latent = randn(b, 1, tk, 576)
    raw, values = ds_mla_rows(latent)
    q = randn(b, h, tq, 576).to(torch.float32)
    idx, cnt = list_tensor(1, 1, tq, 48, tk)

    def rows2(e, g, i):
        return idx[0, 0, i, : cnt[0, 0, i, 0]].tolist()

    o, allowed = listed_attention(q, values, values[..., :512], rows2, tk, scale)
    c = Case("key_lists_mla_fp8_ds")
    c.f32("q", q)
    c.tensor("k", "fp8_ds_mla", (b, 1, tk, 576), raw)
    c.view("v", "k", 512)
    c.tensor("key_indices", "int32", idx.shape, idx)
    c.tensor("key_counts", "int32", cnt.shape, cnt)
    out.append(finish(c, q, values, values[..., :512], allowed, scale, o))
    return out


def main():
    cases = int8_cases() + fp8_cases() + ggml_cases() + mla_cases() + key_list_cases()
    out = pathlib.Path(__file__).with_name("caches.txt")
    with out.open("w") as f:
        f.write(f"# PyTorch {torch.__version__.split('+')[0]}: quantized caches, absorbed MLA and key "
                "lists, o in float64 on PyTorch's dequantized values\n")
        for c in cases:
            f.write(c.text())
    print(f"wrote {out} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
