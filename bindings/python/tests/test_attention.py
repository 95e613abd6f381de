"""octattn from Python: against float64 numpy math and torch SDPA, the error paths,
views of any strides, the stages, threads and the torch custom op."""
import threading

import numpy as np
import pytest

import octattn

torch = pytest.importorskip("torch")


def reference(q, k, v, *, causal=True, window=0, stride=0, scale=None, q_start=None,
              k_start=0, chunk=0, softcap=0.0, alibi_slopes=None, sinks=None, bias=None,
              mask=None):
    """include/octattn.h's SEMANTICS in float64: o [B, Hq, Tq, Dv] and lse [B, Hq, Tq]."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, Hq, Tq, D = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    g = Hq // Hkv
    scale = 1.0 / np.sqrt(D) if scale is None else scale
    q_start = k_start + Tk - Tq if q_start is None else q_start
    qp = q_start + np.arange(Tq)[:, None]
    kp = k_start + np.arange(Tk)[None, :]
    d = qp - kp
    allowed = np.ones((Tq, Tk), bool)
    if causal:
        allowed = d >= 0
        if window > 0:
            allowed &= (d < window) | ((stride > 0) & (kp % max(stride, 1) == 0))
    if chunk > 0:
        allowed &= (qp // chunk) == (kp // chunk)
    o = np.zeros((B, Hq, Tq, v.shape[3]))
    lse = np.full((B, Hq, Tq), -np.inf)
    for b in range(B):
        for h in range(Hq):
            s = scale * q[b, h] @ k[b, h // g].T
            if softcap > 0:
                s = softcap * np.tanh(s / softcap)
            if alibi_slopes is not None:
                s = s + alibi_slopes[h] * (kp - qp)
            if bias is not None:
                s = s + np.asarray(bias[b, h], np.float64)
            ok = allowed.copy()
            if mask is not None:
                ok &= np.asarray(mask[b, h], bool)
            s = np.where(ok, s, -np.inf)
            m = s.max(axis=1, keepdims=True)
            if sinks is not None:
                m = np.maximum(m, sinks[h])
            m = np.where(np.isfinite(m), m, 0.0)
            e = np.exp(s - m)
            den = e.sum(axis=1, keepdims=True)
            if sinks is not None:
                den = den + np.exp(sinks[h] - m)
            with np.errstate(invalid="ignore", divide="ignore"):
                w = np.where(den > 0, e / den, 0.0)
                lse[b, h] = np.where(den[:, 0] > 0, np.log(den[:, 0]) + m[:, 0], -np.inf)
            o[b, h] = w @ v[b, h // g]
    return o, lse


def randn(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def tol(v):
    return 2e-5 * max(1.0, float(np.abs(v).max()))


@pytest.mark.parametrize("opts", [
    {}, {"causal": False}, {"window": 5}, {"window": 4, "stride": 3}, {"chunk": 6},
    {"q_start": 3}, {"scale": 0.3}, {"softcap": 2.0}, {"k_start": 5, "window": 6},
])
def test_against_float64(opts):
    rng = np.random.default_rng(1)
    q, k, v = randn(rng, 2, 4, 9, 16), randn(rng, 2, 2, 13, 16), randn(rng, 2, 2, 13, 8)
    o, lse = octattn.attention(q, k, v, return_lse=True, **opts)
    ro, rlse = reference(q, k, v, **opts)
    assert o.dtype == np.float32 and o.shape == (2, 4, 9, 8) and lse.shape == (2, 4, 9)
    np.testing.assert_allclose(o, ro, atol=tol(v), rtol=0)
    np.testing.assert_allclose(lse, rlse, atol=1e-5, rtol=1e-5)


def test_modifiers_against_float64():
    rng = np.random.default_rng(2)
    q, k, v = randn(rng, 1, 4, 7, 8), randn(rng, 1, 1, 7, 8), randn(rng, 1, 1, 7, 8)
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
    sinks = np.array([0.0, 1.0, -np.inf, 2.0], np.float32)
    bias = randn(rng, 1, 4, 7, 7)
    mask = rng.random((1, 4, 7, 7)) > 0.3
    opts = dict(alibi_slopes=slopes, sinks=sinks, bias=bias, mask=mask, softcap=3.0)
    o, lse = octattn.attention(q, k, v, return_lse=True, **opts)
    ro, rlse = reference(q, k, v, **opts)
    np.testing.assert_allclose(o, ro, atol=tol(v), rtol=0)
    np.testing.assert_allclose(lse, rlse, atol=1e-5, rtol=1e-5)


def test_weights_on_the_naive_path():
    rng = np.random.default_rng(3)
    q, k, v = randn(rng, 1, 2, 5, 8), randn(rng, 1, 2, 5, 8), randn(rng, 1, 2, 5, 8)
    o, w = octattn.attention(q, k, v, return_weights=True, algorithm="naive")
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-6)
    assert np.all(np.triu(w[0, 0], 1) == 0)
    np.testing.assert_allclose(o, np.einsum("bhij,bhjd->bhid", w, v), atol=1e-5)
    assert octattn.last_run()["algorithm"] == "naive"


def test_torch_matches_sdpa_and_numpy_bytes():
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 8, 33, 32, generator=g)
    k = torch.randn(2, 2, 33, 32, generator=g)
    v = torch.randn(2, 2, 33, 32, generator=g)
    o = octattn.attention(q, k, v)
    assert isinstance(o, torch.Tensor) and o.dtype == torch.float32
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                           enable_gqa=True)
    torch.testing.assert_close(o, ref, atol=1e-5, rtol=0)
    # numpy and torch views of the same numbers give the same bytes.
    on = octattn.attention(q.numpy(), k.numpy(), v.numpy())
    assert np.array_equal(on, o.numpy())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16bit_tensors_are_the_float32_call_on_their_values(dtype):
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(6)
    q = torch.randn(2, 8, 40, 64, generator=g).to(dt)
    k = torch.randn(2, 2, 300, 64, generator=g).to(dt)
    v = torch.randn(2, 2, 300, 64, generator=g).to(dt)
    for tq in (40, 1):  # a prefill, and a decode step over a 16-bit cache
        qs = q[:, :, :tq]
        o = octattn.attention(qs, k, v)
        assert o.dtype == dt
        o32 = octattn.attention(qs.float(), k.float(), v.float())
        if octattn.last_run()["target"] in ("avx512_bf16", "amx_bf16") and dtype == "bfloat16":
            # bf16 q.k on vdpbf16ps rounds its own way: within the bound; avx512 gives
            # the widened call's bytes
            torch.testing.assert_close(o.float(), o32, atol=2e-2, rtol=0)
            octattn.set_target("highway", "avx512")
            try:
                o = octattn.attention(qs, k, v)
                o32 = octattn.attention(qs.float(), k.float(), v.float())
            finally:
                octattn.set_target()
        # the f32 call on the widened values, rounded to nearest even (torch's rounding)
        assert torch.equal(o.view(torch.int16), o32.to(dt).view(torch.int16))
        # f32 queries over the 16-bit cache, o in f32
        assert torch.equal(octattn.attention(qs.float(), k, v), o32)
        allowed = torch.arange(300)[None, :] <= torch.arange(tq)[:, None] + 300 - tq
        ref = torch.nn.functional.scaled_dot_product_attention(
            qs.float(), k.float(), v.float(), attn_mask=allowed, enable_gqa=True)
        torch.testing.assert_close(o32, ref, atol=1e-5, rtol=0)
    if dtype == "float16":  # numpy has float16: the same bytes
        on = octattn.attention(q.numpy(), k.numpy(), v.numpy())
        assert on.dtype == np.float16
        assert np.array_equal(on.view(np.int16), octattn.attention(q, k, v).numpy().view(np.int16))
    with pytest.raises(octattn.Error):  # o in another 16-bit dtype than q's
        octattn.attention(q, k, v, out=torch.empty(2, 8, 40, 64, dtype=torch.float16
                                                   if dtype == "bfloat16" else torch.bfloat16))


def test_views_of_any_strides_are_read_in_place():
    rng = np.random.default_rng(5)
    B, T, Hq, Hkv, D = 2, 11, 4, 2, 16
    # A packed QKV projection [B, T, (Hq + 2 Hkv) D], seen as three [B, T, H, D] views.
    qkv = randn(rng, B, T, (Hq + 2 * Hkv) * D)
    q = qkv[:, :, :Hq * D].reshape(B, T, Hq, D)
    k = qkv[:, :, Hq * D:(Hq + Hkv) * D].reshape(B, T, Hkv, D)
    v = qkv[:, :, (Hq + Hkv) * D:].reshape(B, T, Hkv, D)
    assert not q.flags.c_contiguous
    out = np.empty((B, T, Hq, D), np.float32)
    octattn.attention(q, k, v, layout="bthd", out=out)
    dense = octattn.attention(*(np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v)))
    assert np.array_equal(out.transpose(0, 2, 1, 3), dense)
    # torch: transposed views of a [B, T, H, D] projection, as models make them.
    tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(x)).transpose(1, 2) for x in (q, k, v))
    assert np.array_equal(octattn.attention(tq, tk, tv).numpy(), dense)
    # a strided head dimension (every other element)
    wide = randn(rng, 1, 2, 5, 32)
    got = octattn.attention(wide[..., ::2], wide[..., ::2], wide[..., ::2])
    want = octattn.attention(*(np.ascontiguousarray(wide[..., ::2]),) * 3)
    assert np.array_equal(got, want)


def test_errors_carry_status_and_message_and_write_nothing():
    rng = np.random.default_rng(6)
    q, k, v = randn(rng, 1, 3, 4, 8), randn(rng, 1, 2, 4, 8), randn(rng, 1, 2, 4, 8)
    out = np.full((1, 3, 4, 8), 7.0, np.float32)
    with pytest.raises(octattn.Error) as e:
        octattn.attention(q, k, v, out=out)  # 3 query heads over 2 kv heads
    assert e.value.status == octattn.STATUS["INVALID_SHAPE"]
    assert e.value.status_name == "INVALID_SHAPE" and "kv_heads" in e.value.message
    assert np.all(out == 7.0)
    q = randn(rng, 1, 2, 4, 8)
    with pytest.raises(octattn.Error) as e:
        octattn.attention(q, k, v, window=2, causal=False)
    assert e.value.status == octattn.STATUS["INVALID_OPTION"]
    with pytest.raises(octattn.Error) as e:
        octattn.attention(q, k, v, out=q)  # the output is an input
    assert e.value.status == octattn.STATUS["ALIASING"]
    with pytest.raises(octattn.Error) as e:
        octattn.attention(q, k[:, :, ::-1], v)  # numpy's negative strides
    assert e.value.status == octattn.STATUS["INVALID_STRIDE"]
    with pytest.raises(octattn.Error) as e:
        octattn.attention(q, k, v, return_weights=True, algorithm="fused")
    assert e.value.status == octattn.STATUS["UNSUPPORTED"]
    with pytest.raises(TypeError):
        octattn.attention(q.astype(np.float64), k, v)
    with pytest.raises(ValueError):
        octattn.attention(q[0, 0], k, v)
    with pytest.raises(ValueError):
        octattn.attention(q, k, v, alibi_slopes=np.ones(3, np.float32))


def test_stages_compose_to_attention():
    rng = np.random.default_rng(7)
    x = randn(rng, 2, 6, 4 * 8)
    q, k, v = (octattn.split_heads(x, 4),) * 3
    s = octattn.scale(octattn.scores(q, k), 1 / np.sqrt(8))
    octattn.mask(s, window=3)
    w, lse = octattn.softmax(s, return_lse=True)
    o = octattn.weighted_sum(w, v)
    fused, flse = octattn.attention(q, k, v, window=3, return_lse=True, algorithm="naive")
    np.testing.assert_allclose(o, fused, atol=1e-5)
    np.testing.assert_allclose(lse, flse, atol=1e-5)
    merged = octattn.merge_heads(o)
    assert merged.shape == (2, 6, 32)
    assert np.array_equal(octattn.split_heads(merged, 4), o)
    qkv = randn(rng, 1, 5, (2 + 2) * 8)
    q2, k2, v2 = octattn.split_qkv(qkv, 2, 1)
    assert np.array_equal(q2[0, 1], qkv[0, :, 8:16]) and np.array_equal(v2[0, 0], qkv[0, :, 24:])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_stages_take_16bit_tensors(dtype):
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(8)
    x = torch.randn(2, 6, (2 + 2) * 8, generator=g).to(dt)
    q, k, v = octattn.split_qkv(x, 2, 1)  # copies in x's dtype
    assert q.dtype == dt and torch.equal(q[0, 1].view(torch.int16), x[0, :, 8:16].view(torch.int16))
    assert torch.equal(octattn.merge_heads(octattn.split_heads(x, 4)).view(torch.int16),
                       x.view(torch.int16))
    # scores and the weighted sum read 16-bit q, k, v: the float32 stages' bytes
    s = octattn.scores(q, k)
    assert s.dtype == torch.float32 and torch.equal(s, octattn.scores(q.float(), k.float()))
    w = octattn.softmax(s)
    assert torch.equal(octattn.weighted_sum(w, v), octattn.weighted_sum(w, v.float()))


def test_merge_of_key_shards():
    rng = np.random.default_rng(8)
    q, k, v = randn(rng, 1, 2, 4, 8), randn(rng, 1, 2, 12, 8), randn(rng, 1, 2, 12, 8)
    whole, wlse = octattn.attention(q, k, v, causal=False, return_lse=True)
    parts = [octattn.attention(q, k[:, :, a:b], v[:, :, a:b], causal=False, return_lse=True)
             for a, b in ((0, 5), (5, 12))]
    o, lse = octattn.merge([p[0] for p in parts], [p[1] for p in parts], return_lse=True)
    np.testing.assert_allclose(o, whole, atol=2e-6)
    np.testing.assert_allclose(lse, wlse, atol=2e-6)


def test_threads_targets_and_layouts():
    octattn.set_threads(1)
    assert octattn.get_threads() == 1
    q = np.ones((1, 1, 2, 8), np.float32)
    octattn.attention(q, q, q)
    assert octattn.last_run()["threads"] == 1
    octattn.set_threads(0)
    octattn.set_target("xsimd", "sse2")
    octattn.attention(q, q, q)
    assert octattn.last_run()["backend"] == "xsimd" and octattn.last_run()["target"] == "sse2"
    octattn.set_target()
    assert "scalar" in octattn.available_targets("highway")
    # each Python thread has its own context
    seen = []
    t = threading.Thread(target=lambda: seen.append(octattn.get_threads()))
    t.start()
    t.join()
    assert seen and seen[0] >= 1
    for name in ("octattn_tensor", "octattn_attention_options", "octattn_run_info"):
        assert octattn._octattn.struct_layout(name, None) > 0
    assert octattn._octattn.struct_layout("octattn_tensor", "nope") == -1


def test_torch_calls_follow_torch_threads():
    script = ("import torch, octattn; torch.set_num_threads(1); q = torch.ones(1, 1, 2, 8); "
              "octattn.attention(q, q, q); print(octattn.last_run()['threads'])")
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "1"
    env_script = ("import numpy as np, octattn; q = np.ones((1, 1, 2, 8), np.float32); "
                  "octattn.attention(q, q, q); print(octattn.last_run()['threads'])")
    import os
    env = dict(os.environ, OCTATTN_THREADS="1")
    out = subprocess.run([sys.executable, "-c", env_script], capture_output=True, text=True,
                         check=True, env=env).stdout
    assert out.strip() == "1"


def test_custom_op_and_torch_compile_without_graph_break():
    import octattn.ops  # noqa: F401
    g = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(1, 4, 6, 16, generator=g) for _ in range(3))
    o, lse = torch.ops.octattn.attention(q, k, v, window=3)
    want, wlse = octattn.attention(q, k, v, window=3, return_lse=True)
    assert torch.equal(o, want) and torch.equal(lse, wlse)

    def f(q, k, v):
        o, _ = torch.ops.octattn.attention(q * 2.0, k, v, causal=True)
        return o + 1.0

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(q, k, v), f(q, k, v))
    explanation = torch._dynamo.explain(f)(q, k, v)
    assert explanation.graph_break_count == 0
    torch.library.opcheck(torch.ops.octattn.attention.default, (q, k, v),
                          test_utils=("test_schema", "test_faketensor"))


def test_padded_ragged_and_paged_batches_equal_calls_of_their_own():
    """One call over sequences of different lengths gives each sequence the bytes of its
    own call: a left-padded batch (kv_starts, kv_lens), a ragged batch (cu_seqlens, rows
    [total, H, D]) and a paged cache (block_table, vLLM's [blocks, block_size, H, D])."""
    g = torch.Generator().manual_seed(3)
    B, Hq, Hkv, T, D = 3, 4, 2, 12, 8
    q, k, v = (torch.randn(B, h, T, D, generator=g) for h in (Hq, Hkv, Hkv))
    pads = [0, 5, 9]
    o = octattn.attention(q, k, v, kv_starts=torch.tensor(pads),
                          kv_lens=torch.tensor([T - p for p in pads]))
    for b, p in enumerate(pads):
        own = octattn.attention(q[b:b + 1, :, p:], k[b:b + 1, :, p:], v[b:b + 1, :, p:])
        assert torch.equal(o[b:b + 1, :, p:], own)
        assert torch.all(o[b, :, :p] == 0)  # padded query rows read nothing

    cu = torch.tensor([0, 5, 6, 13])
    qr, kr, vr = (torch.randn(13, h, D, generator=g) for h in (Hq, Hkv, Hkv))
    o, lse = octattn.attention(qr, kr, vr, cu_seqlens_q=cu, cu_seqlens_k=cu, return_lse=True)
    assert o.shape == (13, Hq, D) and lse.shape == (Hq, 13)
    for s in range(3):
        a, b = int(cu[s]), int(cu[s + 1])
        own, own_lse = octattn.attention(qr[None, a:b], kr[None, a:b], vr[None, a:b],
                                         layout="bthd", return_lse=True)
        assert torch.equal(o[a:b], own[0]) and torch.equal(lse[:, a:b], own_lse[0])

    bs = 4
    kp, vp = (torch.randn(8, bs, Hkv, D, generator=g) for _ in range(2))
    table = torch.tensor([[3, 1, 6], [0, 2, 5]], dtype=torch.int32)  # block 2 unused
    lens = torch.tensor([10, 6])
    qd = torch.randn(2, 1, Hq, D, generator=g)  # one new token each, [B, T, H, D]
    o = octattn.attention(qd, kp, vp, block_table=table, kv_lens=lens, layout="bthd")
    for s in range(2):
        rows = lambda pool: torch.cat([pool[int(i)] for i in table[s]])[None, :int(lens[s])]
        own = octattn.attention(qd[s:s + 1], rows(kp), rows(vp), layout="bthd")
        assert torch.equal(o[s:s + 1], own)


def test_shared_blocks_are_read_once_with_the_bytes_of_copies():
    """Cascade decode: sequences whose block tables start with the same blocks (a shared
    prompt) read those keys once; the output is that of the same blocks copied."""
    g = torch.Generator().manual_seed(5)
    Hq, Hkv, D, bs, n = 8, 2, 32, 16, 5
    shared = 2048 // bs  # two spans of 1024 keys
    cols = shared + 20
    kp, vp = (torch.randn(shared + n * cols, bs, Hkv, D, generator=g) for _ in range(2))
    own = torch.arange(shared, shared + n * cols, dtype=torch.int32).reshape(n, cols)
    table = own.clone()
    table[:, :shared] = torch.arange(shared, dtype=torch.int32)  # the shared blocks
    for s in range(n):  # the copies: each sequence's own blocks hold the shared rows
        kp[own[s, :shared].long()] = kp[:shared].clone()
        vp[own[s, :shared].long()] = vp[:shared].clone()
    lens = torch.tensor([2048 + 5 * s + 1 for s in range(n)])
    q = torch.randn(n, 1, Hq, D, generator=g)
    o = octattn.attention(q, kp, vp, block_table=table, kv_lens=lens, layout="bthd")
    assert octattn.last_run()["shared_kv_rows"] == 2 * (n - 1) * 1024 * Hkv
    copied = octattn.attention(q, kp, vp, block_table=own, kv_lens=lens, layout="bthd")
    assert octattn.last_run()["shared_kv_rows"] == 0
    assert torch.equal(o, copied)


def test_batch_arguments_are_checked():
    q = torch.randn(3, 2, 4, 8)
    with pytest.raises(ValueError, match="3 entries"):
        octattn.attention(q, q, q, kv_lens=torch.tensor([1, 2]))
    with pytest.raises(TypeError, match="int64"):
        octattn.attention(q, q, q, kv_lens=torch.tensor([1, 2, 3], dtype=torch.int32))
    with pytest.raises(TypeError, match="int32"):
        octattn.attention(q, q, q, block_table=torch.zeros(3, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        octattn.attention(q, q, q, cu_seqlens_k=torch.tensor([0, 4]))
    out = torch.full((3, 2, 4, 8), 7.0)
    with pytest.raises(octattn.Error, match="kv_lens"):  # past the rows: nothing written
        octattn.attention(q, q, q, kv_lens=np.array([1, 2, 30]), out=out)
    assert torch.all(out == 7.0)


def test_mla_latent_rows_as_k_and_a_view_as_v():
    """MLA's absorbed decode: 64 query heads on one latent kv head, v a view of k's first
    value_dim columns; against float64 math, and the same bytes on 1 and 2 threads (its
    keys split into units) as entry 0 of a batch of 16 (not split), from numpy and torch."""
    rng = np.random.default_rng(11)
    q, latent = randn(rng, 16, 64, 2, 96), randn(rng, 16, 1, 2600, 96)
    v = latent[..., :64]
    assert not v.flags["C_CONTIGUOUS"]
    ro, rlse = reference(q[:1], latent[:1], v[:1])
    octattn.set_threads(1)
    one, lse = octattn.attention(q[:1], latent[:1], v[:1], return_lse=True)
    octattn.set_threads(2)
    two = octattn.attention(q[:1], latent[:1], v[:1])
    batch = octattn.attention(q, latent, v)
    octattn.set_threads(0)
    assert one.shape == (1, 64, 2, 64)
    np.testing.assert_allclose(one, ro, atol=tol(v), rtol=0)
    np.testing.assert_allclose(lse, rlse, atol=1e-5, rtol=1e-5)
    assert one.tobytes() == two.tobytes() == batch[:1].tobytes()
    t = torch.from_numpy(latent)
    ot = octattn.attention(torch.from_numpy(q[:1]), t[:1], t[:1, :, :, :64])
    assert ot.numpy().tobytes() == one.tobytes()
