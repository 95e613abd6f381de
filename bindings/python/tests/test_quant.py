"""Quantized KV caches from Python: numpy int8 and ggml blocks, torch int8 and float8
tensors, octattn.kv_store, and the outputs against PyTorch's own dequantize-then-SDPA."""
import numpy as np
import pytest

import octattn

torch = pytest.importorskip("torch")


def _qkv(seed, B=2, Hq=8, Hkv=2, Tq=3, Tk=200, D=64):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, Hq, Tq, D), dtype=np.float32)
    k = rng.standard_normal((B, Hkv, Tk, D), dtype=np.float32)
    v = rng.standard_normal((B, Hkv, Tk, D), dtype=np.float32)
    k[:, :, :, 5] *= 30  # an outlier channel, as trained keys have
    return q, k, v


def _int8_cache(k, v, G=32):
    """k and v stored as numpy int8 caches with a scale per G channels, and the header's
    values of them: s * i, s repeated over its G channels."""
    kq, vq = np.empty(k.shape, np.int8), np.empty(v.shape, np.int8)
    ks = np.empty(k.shape[:3] + (k.shape[3] // G,), np.float32)
    vs = np.empty_like(ks)
    octattn.kv_store(k, kq, ks)
    octattn.kv_store(v, vq, vs)
    kd = (np.repeat(ks, G, axis=3) * kq).astype(np.float32)
    vd = (np.repeat(vs, G, axis=3) * vq).astype(np.float32)
    return kq, vq, ks, vs, kd, vd


def test_numpy_int8_cache_computes_on_its_dequantized_values():
    q, k, v = _qkv(1)
    kq, vq, ks, vs, kd, vd = _int8_cache(k, v)
    assert np.abs(kd - k).max() <= ks.max() / 2 * (1 + 1e-6)
    o = octattn.attention(q, kq, vq, k_scale=ks, v_scale=vs)
    assert np.array_equal(o, octattn.attention(q, kd, vd))


def test_ggml_blocks_read_in_place():
    q, k, v = _qkv(2)
    B, H, T, D = k.shape
    for fmt, unit in (("q8_0", 34), ("q4_0", 18)):
        kb = np.zeros((B, H, T, D // 32 * unit), np.uint8)
        vb = np.zeros_like(kb)
        octattn.kv_store(k, kb, kv_format=fmt)
        octattn.kv_store(v, vb, kv_format=fmt)
        # ggml's definition, from the bytes.
        def values(blocks):
            b = blocks.reshape(B, H, T, D // 32, unit)
            d = b[..., :2].copy().view(np.float16).astype(np.float32)
            if fmt == "q8_0":
                qv = b[..., 2:].view(np.int8).astype(np.float32)
            else:
                lo, hi = b[..., 2:] & 15, b[..., 2:] >> 4
                qv = np.concatenate([lo, hi], axis=-1).astype(np.float32) - 8
            return (d * qv).reshape(B, H, T, D).astype(np.float32)
        o = octattn.attention(q, kb, vb, kv_format=fmt)
        assert np.array_equal(o, octattn.attention(q, values(kb), values(vb)))


def test_qk_int8_rounds_q_in_blocks_as_the_header_says():
    q, k, v = _qkv(5)
    kq, vq, ks, vs, kd, vd = _int8_cache(k, v)
    # q rounded per block of 32: u = max|x| / 127, n = round-half-even(x * 127 / max|x|).
    blocks = q.reshape(q.shape[:3] + (-1, 32)).astype(np.float64)
    amax = np.abs(blocks).max(axis=-1, keepdims=True)
    n = np.clip(np.rint(blocks * 127 / amax), -127, 127)
    qr = ((amax / 127).astype(np.float32) * n.astype(np.float32)).reshape(q.shape)
    want = octattn.attention(qr, kd, vd, algorithm="reference")
    o = octattn.attention(q, kq, vq, k_scale=ks, v_scale=vs, qk="int8")
    assert np.abs(o - want).max() <= 1e-5 * np.abs(vd).max()
    exact = octattn.attention(q, kq, vq, k_scale=ks, v_scale=vs)
    assert np.abs(exact - want).max() > 1e-4  # the rounding of q shows
    with pytest.raises(ValueError):
        octattn.attention(q, kq, vq, k_scale=ks, v_scale=vs, qk="int4")
    with pytest.raises(RuntimeError):  # f32 keys: no integer dot products
        octattn.attention(q, k, v, qk="int8")


def test_torch_fp8_and_int8_against_pytorch_dequantize_then_sdpa():
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("torch without float8")
    q, k, v = (torch.from_numpy(x) for x in _qkv(3, Tq=1, Tk=300))
    scale = torch.tensor([0.5, 2.0]).reshape(1, 2, 1, 1)  # vLLM's per-kv-head scales
    for dt in (torch.float8_e4m3fn, torch.float8_e5m2):
        k8 = (k / scale).to(dt)  # PyTorch's own conversion
        v8 = (v / scale).to(dt)
        o = octattn.attention(q, k8, v8, k_scale=scale, v_scale=scale)
        kd, vd = k8.float() * scale, v8.float() * scale
        assert torch.equal(o, octattn.attention(q, kd, vd))
        ref = torch.nn.functional.scaled_dot_product_attention(
            q, kd.repeat_interleave(4, 1), vd.repeat_interleave(4, 1))
        assert (o - ref).abs().max() < 1e-5
    # int8 stored by octattn, dequantized by torch.
    ki = torch.empty(k.shape, dtype=torch.int8)
    ks = torch.empty(k.shape[:3] + (2,))
    octattn.kv_store(k, ki, ks)
    kd = ks.repeat_interleave(32, 3) * ki.float()
    o = octattn.attention(q, ki, v, k_scale=ks)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, kd.repeat_interleave(4, 1), v.repeat_interleave(4, 1))
    assert (o - ref).abs().max() < 1e-5


def test_deepseek_fp8_latent_cache_against_torch_dequantize_then_attention():
    """kv_format="fp8_ds_mla": latent rows stored by kv_store (scales max|x| / 448, the
    rope part bf16), read as k and, through the first 512 bytes of each row, as v: the
    bytes of the f32 call on the values PyTorch's views of the rows define, and within
    float64 attention's bound of them."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(5)
    B, Hq, T, Tq = 1, 16, 300, 2
    latent = torch.randn(B, 1, T, 576, generator=gen)
    cache = torch.empty(B, 1, T, 656, dtype=torch.uint8)
    octattn.kv_store(latent, cache, kv_format="fp8_ds_mla")
    codes = cache[..., :512].contiguous().view(torch.float8_e4m3fn).float()
    scales = cache[..., 512:528].contiguous().view(torch.float32)
    groups = latent[..., :512].reshape(B, 1, T, 4, 128).abs().amax(-1)
    assert torch.equal(scales, groups / 448)
    rope = cache[..., 528:].contiguous().view(torch.bfloat16).float()
    values = torch.cat([codes * scales.repeat_interleave(128, -1), rope], -1)
    assert torch.equal(rope, latent[..., 512:].bfloat16().float())
    assert (values[..., :512] - latent[..., :512]).abs().max() <= groups.max() / 448 * 32
    q = torch.randn(B, Hq, Tq, 576, generator=gen)
    o = octattn.attention(q, cache, cache[..., :512], kv_format="fp8_ds_mla")
    o32 = octattn.attention(q, values, values[..., :512])
    assert o.numpy().tobytes() == o32.numpy().tobytes()
    k64 = values.double()
    s = (q.double() @ k64.transpose(-1, -2)) / 576 ** 0.5
    pos = torch.arange(T - Tq, T)[:, None] >= torch.arange(T)[None, :]
    p = torch.softmax(s.masked_fill(~pos, float("-inf")), dim=-1)
    np.testing.assert_allclose(o.numpy(), (p @ k64[..., :512]).numpy(), atol=2e-5, rtol=0)
    with pytest.raises(ValueError, match="656"):
        octattn.attention(q, cache[..., :600], cache[..., :512], kv_format="fp8_ds_mla")


def test_kv_store_slots_and_errors():
    rng = np.random.default_rng(4)
    new = rng.standard_normal((2, 2, 1, 64), dtype=np.float32)  # a decode step, 2 sequences
    pool = np.zeros((8, 2, 16, 64), np.int8)
    scales = np.zeros((8, 2, 16, 2), np.float32)
    octattn.kv_store(new, pool, scales, slots=np.array([5 * 16 + 3, -1], np.int64))
    assert np.abs(pool[5, :, 3] * np.repeat(scales[5, :, 3], 32, -1) - new[0, :, 0]).max() < 0.05
    assert not pool[:5].any() and not pool[6:].any()
    with pytest.raises(octattn.Error, match="NULL"):  # int8 needs its scale
        octattn.kv_store(new, np.zeros((2, 2, 1, 64), np.int8))
    with pytest.raises(octattn.Error, match="quantized"):  # a quantized q
        octattn.attention(np.zeros((1, 1, 1, 64), np.int8), pool[:1], pool[:1])
