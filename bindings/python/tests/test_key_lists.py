"""Token-sparse attention from Python (attention(..., key_indices=)): DeepSeek's indexer
top-k as int32 lists, one a token for every head; against an explicit gather in float64
and PyTorch's gather-then-SDPA, from numpy and torch; a second list, counts and -1
padding; MLA's latent rows (v a view of k); a ragged batch; the backward against
PyTorch's autograd; and the errors."""
import numpy as np
import pytest

import octattn


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def gathered(q, k, v, lists, q_start):
    """float64 attention of each row over the keys its lists name (the set, causal)."""
    B, Hq, Tq, _ = q.shape
    group = Hq // k.shape[1]
    o = np.zeros((B, Hq, Tq, v.shape[3]))
    for b in range(B):
        for i in range(Tq):
            keys = sorted({int(j) for j in lists(b, i) if 0 <= j <= q_start + i})
            for h in range(Hq):
                if not keys:
                    continue
                kk = k[b, h // group, keys].astype(np.float64)
                s = kk @ q[b, h, i].astype(np.float64) / np.sqrt(q.shape[3])
                p = np.exp(s - s.max())
                o[b, h, i] = (p / p.sum()) @ v[b, h // group, keys].astype(np.float64)
    return o


def test_top_k_lists_against_an_explicit_gather():
    """[Tq, n] lists (every entry's and head's) with -1 padding, unsorted, duplicates and
    keys past the causal bound (masked), over GQA; [B, Tq, n] lists with counts."""
    rng = np.random.default_rng(3)
    B, Hq, Hkv, Tq, Tk, D, n = 2, 8, 2, 5, 700, 64, 40
    q, k, v = randn(rng, B, Hq, Tq, D), randn(rng, B, Hkv, Tk, D), randn(rng, B, Hkv, Tk, D)
    idx = rng.integers(-1, Tk, size=(Tq, n), dtype=np.int32)
    idx[:, 5] = idx[:, 4]
    o = octattn.attention(q, k, v, key_indices=idx)
    ref = gathered(q, k, v, lambda b, i: idx[i], Tk - Tq)
    np.testing.assert_allclose(o, ref, atol=2e-5, rtol=0)
    per = rng.integers(0, Tk, size=(B, Tq, n), dtype=np.int32)
    counts = rng.integers(0, n + 1, size=(B, Tq), dtype=np.int32)
    o2 = octattn.attention(q, k, v, key_indices=per, key_counts=counts)
    ref2 = gathered(q, k, v, lambda b, i: per[b, i, :counts[b, i]], Tk - Tq)
    np.testing.assert_allclose(o2, ref2, atol=2e-5, rtol=0)


def test_a_second_list_joins_the_first():
    """A top-k list and a local window as key_indices2: the bytes of one list of both."""
    rng = np.random.default_rng(4)
    q, k, v = randn(rng, 1, 4, 3, 32), randn(rng, 1, 4, 500, 32), randn(rng, 1, 4, 500, 32)
    top = rng.integers(0, 480, size=(3, 30), dtype=np.int32)
    local = np.stack([np.arange(500 - 3 + i - 15, 500 - 3 + i + 1, dtype=np.int32)
                      for i in range(3)])
    two = octattn.attention(q, k, v, key_indices=top, key_indices2=local)
    one = octattn.attention(q, k, v, key_indices=np.concatenate([local, top], axis=1))
    assert two.tobytes() == one.tobytes()


def test_mla_sparse_decode_from_torch_against_gather_then_sdpa():
    """DSA's decode: 32 heads on one latent kv head (576/512 scaled down to 96/64), v a
    view of k, one top-k list per token; against PyTorch's gather-then-SDPA."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(5)
    Hq, Tk, D, Dv, topk = 32, 3000, 96, 64, 256
    q = torch.randn(1, Hq, 1, D, generator=g)
    latent = torch.randn(1, 1, Tk, D, generator=g)
    idx = torch.randperm(Tk, generator=g)[:topk].to(torch.int32).reshape(1, topk)
    o = octattn.attention(q, latent, latent[..., :Dv], key_indices=idx)
    kk = latent[0, 0, idx[0].long()].double()
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.double(), kk[None, None].expand(1, Hq, topk, D),
        kk[None, None, :, :Dv].expand(1, Hq, topk, Dv))
    torch.testing.assert_close(o.double(), ref, atol=2e-5, rtol=0)
    octattn.set_threads(1)
    one = octattn.attention(q, latent, latent[..., :Dv], key_indices=idx)
    octattn.set_threads(0)
    assert torch.equal(one.view(torch.int32), o.view(torch.int32))


def test_ragged_rows_read_their_own_lists():
    """A ragged batch's lists are its packed rows' ([total, n]), entries counted from
    each sequence's first key: each sequence's own call's bytes."""
    rng = np.random.default_rng(6)
    tq, tk, H, D, n = [3, 1], [40, 90], 2, 16, 12
    cu_q = np.array([0, 3, 4], dtype=np.int64)
    cu_k = np.array([0, 40, 130], dtype=np.int64)
    q, k, v = randn(rng, 4, H, D), randn(rng, 130, H, D), randn(rng, 130, H, D)
    idx = np.concatenate([rng.integers(0, tk[s], size=(tq[s], n), dtype=np.int32)
                          for s in range(2)])
    o = octattn.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, key_indices=idx)
    for s in range(2):
        qs = q[cu_q[s]:cu_q[s + 1]].transpose(1, 0, 2)[None]
        ks = k[cu_k[s]:cu_k[s + 1]].transpose(1, 0, 2)[None]
        vs = v[cu_k[s]:cu_k[s + 1]].transpose(1, 0, 2)[None]
        own = octattn.attention(qs, ks, vs, key_indices=idx[cu_q[s]:cu_q[s + 1]])
        assert own[0].transpose(1, 0, 2).tobytes() == o[cu_q[s]:cu_q[s + 1]].tobytes()


def test_backward_over_lists_against_torch_autograd_of_the_masked_math():
    """octattn.attention_backward over [B, Hkv, Tq, n] lists (unsorted, duplicates, -1,
    keys past the causal bound) against PyTorch's autograd of float64 attention masked to
    the listed pairs, over GQA, several query and key tiles."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    B, Hq, Hkv, Tq, Tk, D, n = 2, 4, 2, 70, 150, 32, 24
    q, k, v = randn(rng, B, Hq, Tq, D), randn(rng, B, Hkv, Tk, D), randn(rng, B, Hkv, Tk, D)
    idx = rng.integers(-1, Tk, size=(B, Hkv, Tq, n), dtype=np.int32)
    idx[..., 3] = idx[..., 2]
    idx[..., 0] = np.arange(Tk - Tq, Tk, dtype=np.int32)[None, None, :]  # a key a row at least
    o, lse = octattn.attention(q, k, v, key_indices=idx, return_lse=True)
    dout = randn(rng, B, Hq, Tq, D)
    dq, dk, dv = octattn.attention_backward(q, k, v, o, lse, dout, key_indices=idx)
    group = Hq // Hkv
    mask = np.zeros((B, Hq, Tq, Tk), dtype=bool)
    for b in range(B):
        for h in range(Hq):
            for i in range(Tq):
                for j in idx[b, h // group, i]:
                    if 0 <= j <= Tk - Tq + i:
                        mask[b, h, i, j] = True
    tq, tk, tv = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    kr, vr = tk.repeat_interleave(group, dim=1), tv.repeat_interleave(group, dim=1)
    s = (tq @ kr.transpose(-1, -2)) / np.sqrt(D)
    p = torch.softmax(s.masked_fill(~torch.from_numpy(mask), float("-inf")), dim=-1)
    ((p @ vr) * torch.tensor(dout, dtype=torch.float64)).sum().backward()
    for got, want in ((dq, tq.grad), (dk, tk.grad), (dv, tv.grad)):
        np.testing.assert_allclose(got, want.numpy(), atol=5e-5, rtol=0)


def test_torch_operator_over_lists_differentiates_through_the_backward():
    """torch.ops.octattn.attention with key lists under autograd: the gradients are those
    of octattn.attention_backward over the same lists, byte for byte."""
    torch = pytest.importorskip("torch")
    import octattn.ops  # noqa: F401 (registers the operators)
    gen = torch.Generator().manual_seed(11)
    B, Hq, Hkv, Tq, Tk, D, n = 1, 4, 2, 70, 150, 32, 24
    q = torch.randn(B, Hq, Tq, D, generator=gen, requires_grad=True)
    k = torch.randn(B, Hkv, Tk, D, generator=gen, requires_grad=True)
    v = torch.randn(B, Hkv, Tk, D, generator=gen, requires_grad=True)
    idx = torch.randint(-1, Tk, (B, Hkv, Tq, n), generator=gen, dtype=torch.int32)
    counts = torch.randint(0, n + 1, (B, Hkv, Tq), generator=gen, dtype=torch.int32)
    o, lse = torch.ops.octattn.attention(q, k, v, key_indices=idx, key_counts=counts)
    dout = torch.randn(o.shape, generator=gen)
    o.backward(dout)
    with torch.no_grad():
        want = octattn.attention_backward(q.detach(), k.detach(), v.detach(), o.detach(),
                                          lse, dout, key_indices=idx, key_counts=counts)
    for got, w in zip((q.grad, k.grad, v.grad), want):
        assert got.numpy().tobytes() == w.numpy().tobytes()
    plain, _ = torch.ops.octattn.attention(q, k, v)
    assert not torch.equal(plain, o)


def test_weights_key_scores_and_mask_over_lists():
    """return_weights and return_key_scores over lists (auto runs naive): the weights of
    float64 math masked to the listed pairs, the key scores their sums over a kv head's
    rows and heads; octattn.mask over lists: the bytes of the bool mask of the pairs."""
    rng = np.random.default_rng(9)
    B, Hq, Hkv, Tq, Tk, D, n = 1, 4, 2, 6, 90, 16, 12
    q, k, v = randn(rng, B, Hq, Tq, D), randn(rng, B, Hkv, Tk, D), randn(rng, B, Hkv, Tk, D)
    idx = rng.integers(-1, Tk, size=(B, Hkv, Tq, n), dtype=np.int32)
    idx[..., 0] = np.arange(Tk - Tq, Tk, dtype=np.int32)
    o, w, ks = octattn.attention(q, k, v, key_indices=idx, return_weights=True,
                                 return_key_scores=True)
    group = Hq // Hkv
    pairs = np.zeros((B, Hq, Tq, Tk), dtype=bool)
    for h in range(Hq):
        for i in range(Tq):
            for j in idx[0, h // group, i]:
                if 0 <= j <= Tk - Tq + i:
                    pairs[0, h, i, j] = True
    kr = np.repeat(k, group, axis=1).astype(np.float64)
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), kr) / np.sqrt(D)
    s = np.where(pairs, s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(w, p, atol=2e-6, rtol=0)
    assert np.all(w[~pairs] == 0)
    want = p.reshape(B, Hkv, group, Tq, Tk).sum(axis=(2, 3))
    np.testing.assert_allclose(ks, want, atol=1e-5, rtol=0)
    scores = randn(rng, B, Hq, Tq, Tk)
    by_lists = octattn.mask(scores.copy(), key_indices=idx)
    by_mask = octattn.mask(scores.copy(), mask=pairs)
    assert by_lists.tobytes() == by_mask.tobytes()


def test_bad_lists_raise():
    rng = np.random.default_rng(7)
    q, k, v = randn(rng, 1, 2, 2, 16), randn(rng, 1, 2, 50, 16), randn(rng, 1, 2, 50, 16)
    with pytest.raises(octattn.Error, match="outside the 50 valid key rows"):
        octattn.attention(q, k, v, key_indices=np.full((2, 4), 50, dtype=np.int32))
    with pytest.raises(octattn.Error, match="must be in"):
        octattn.attention(q, k, v, key_indices=np.zeros((2, 4), dtype=np.int32),
                          key_counts=np.array([5, 1], dtype=np.int32))
    with pytest.raises(TypeError):
        octattn.attention(q, k, v, key_indices=np.zeros((2, 4), dtype=np.int64))
    with pytest.raises(octattn.Error, match="run naive or reference"):
        octattn.attention(q, k, v, key_indices=np.zeros((2, 4), dtype=np.int32), algorithm="fused",
                          return_key_scores=True)
