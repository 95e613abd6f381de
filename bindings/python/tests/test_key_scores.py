"""Key scores from Python (attention(..., return_key_scores=True)): each key's attention
received, summed over its kv head's query heads and the query rows, against the weights
of PyTorch's (or numpy's) softmax; the ragged and paged shapes; o unchanged."""
import numpy as np
import pytest

import octattn


def weights_np(q, k, causal, group):
    """The softmax weights [B, Hq, Tq, Tk] in float64, bottom-right causal."""
    B, Hq, Tq, D = q.shape
    Tk = k.shape[2]
    kk = np.repeat(k.astype(np.float64), group, axis=1)
    s = q.astype(np.float64) @ kk.transpose(0, 1, 3, 2) / np.sqrt(D)
    if causal:
        i = np.arange(Tq)[:, None] + (Tk - Tq)
        s = np.where(np.arange(Tk)[None, :] <= i, s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    return p / p.sum(axis=-1, keepdims=True)


def expected(q, k, causal):
    group = q.shape[1] // k.shape[1]
    w = weights_np(q, k, causal, group)
    B, Hq, Tq, Tk = w.shape
    return w.reshape(B, Hq // group, group, Tq, Tk).sum(axis=(2, 3))


@pytest.mark.parametrize("Hq,Hkv,Tq,Tk", [(4, 2, 33, 33), (8, 2, 1, 2500), (2, 1, 300, 700)])
@pytest.mark.parametrize("algorithm", ["fused", "naive", "reference"])
def test_numpy_sums_of_weights(Hq, Hkv, Tq, Tk, algorithm):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, Hq, Tq, 32), dtype=np.float32)
    k = rng.standard_normal((2, Hkv, Tk, 32), dtype=np.float32)
    v = rng.standard_normal((2, Hkv, Tk, 32), dtype=np.float32)
    o, ks = octattn.attention(q, k, v, return_key_scores=True, algorithm=algorithm)
    assert ks.shape == (2, Hkv, Tk) and ks.dtype == np.float32
    want = expected(q, k, True)
    assert np.all(np.abs(ks - want) <= 1e-5 * want + 1e-6)
    assert np.array_equal(o, octattn.attention(q, k, v, algorithm=algorithm))
    # Every tuple order: o, lse, weights, key scores.
    o2, lse, ks2 = octattn.attention(q, k, v, return_lse=True, return_key_scores=True,
                                     algorithm=algorithm)
    assert lse.shape == (2, Hq, Tq) and np.array_equal(ks, ks2)


def test_torch_against_sdpa_weights():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, h, T, 64, generator=g) for h, T in ((8, 200), (2, 1200), (2, 1200)))
    o, ks = octattn.attention(q, k, v, return_key_scores=True)
    assert isinstance(ks, torch.Tensor) and ks.shape == (1, 2, 1200)
    # PyTorch's weights: softmax of the masked scores (bottom-right causal), heads grouped.
    kk = k.repeat_interleave(4, dim=1).double()
    s = q.double() @ kk.transpose(-1, -2) / 8.0
    s = s.masked_fill(~torch.ones(200, 1200, dtype=torch.bool).tril(1000), float("-inf"))
    want = torch.softmax(s, -1).reshape(1, 2, 4, 200, 1200).sum(dim=(2, 3))
    assert torch.all((ks.double() - want).abs() <= 1e-5 * want + 1e-6)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1),
        attn_mask=torch.ones(200, 1200, dtype=torch.bool).tril(1000))
    assert torch.allclose(o, ref, atol=1e-5)


def test_ragged_and_paged_shapes():
    rng = np.random.default_rng(3)
    lens = [5, 1300, 40]
    cu = np.array([0, 5, 1305, 1345], dtype=np.int64)
    q = rng.standard_normal((3, 4, 16), dtype=np.float32)  # one query row per sequence
    cq = np.arange(4, dtype=np.int64)
    k = rng.standard_normal((1345, 2, 16), dtype=np.float32)
    v = rng.standard_normal((1345, 2, 16), dtype=np.float32)
    o, ks = octattn.attention(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=cu, return_key_scores=True)
    assert ks.shape == (2, 1345)
    # Each sequence alone, its keys' columns.
    for s, n in enumerate(lens):
        qs = q[s:s + 1].transpose(1, 0, 2)[None]
        kv = k[cu[s]:cu[s + 1]].transpose(1, 0, 2)[None]
        vv = v[cu[s]:cu[s + 1]].transpose(1, 0, 2)[None]
        _, own = octattn.attention(qs, kv, vv, return_key_scores=True)
        assert np.array_equal(ks[:, cu[s]:cu[s + 1]], own[0])
        assert np.allclose(own[0].sum(axis=1), 2.0, atol=1e-5)  # two query heads per kv head
    # Paged: blocks of 16 rows, one sequence per row of the table.
    bs, cols = 16, 82
    pool_k = np.zeros((3 * cols, bs, 2, 16), np.float32)
    pool_v = np.zeros_like(pool_k)
    table = np.arange(3 * cols, dtype=np.int32).reshape(3, cols)
    for s, n in enumerate(lens):
        for r in range(n):
            pool_k[table[s, r // bs], r % bs] = k[cu[s] + r]
            pool_v[table[s, r // bs], r % bs] = v[cu[s] + r]
    q4 = q[:, None]  # [B, 1, Hq, D] (bthd, as the pools)
    _, pks = octattn.attention(q4, pool_k, pool_v, block_table=table, layout="bthd",
                               kv_lens=np.array(lens, np.int64), return_key_scores=True)
    assert pks.shape == (3, 2, cols * bs)
    for s, n in enumerate(lens):
        assert np.array_equal(pks[s, :, :n], ks[:, cu[s]:cu[s + 1]])
        assert not pks[s, :, n:].any()
