"""Trees of draft tokens from Python (attention(..., tree=), octattn.pack_tree): the bytes
of the mask tensor of the same pairs, forward and backward, numpy and torch, a batch of
trees, and the errors."""
import numpy as np
import pytest

import octattn


def random_tree(n, rng):
    """kept [n, n]: node c's parent an earlier node or none; a row keeps itself and its
    ancestors."""
    kept = np.zeros((n, n), bool)
    for c in range(n):
        parent = rng.integers(-1, c) if c else -1
        if parent >= 0:
            kept[c] = kept[parent]
        kept[c, c] = True
    return kept


def problem(rng, B=2, Hq=4, Hkv=2, n=13, prefix=40, D=32):
    q = rng.standard_normal((B, Hq, n, D), dtype=np.float32)
    k = rng.standard_normal((B, Hkv, prefix + n, D), dtype=np.float32)
    v = rng.standard_normal((B, Hkv, prefix + n, D), dtype=np.float32)
    kept = np.stack([random_tree(n, rng) for _ in range(B)])
    mask = np.ones((B, 1, n, prefix + n), bool)
    mask[:, 0, :, prefix:] = kept
    return q, k, v, kept, mask


def same_bytes(a, b):
    a, b = (np.asarray(x.detach() if hasattr(x, "detach") else x) for x in (a, b))
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_pack_tree_is_little_endian_bits():
    kept = np.zeros((2, 10, 10), bool)
    kept[0, 3, [0, 3, 9]] = True
    bits = octattn.pack_tree(kept)
    assert bits.dtype == np.uint8 and bits.shape == (2, 10, 2)
    assert bits[0, 3].tolist() == [0b00001001, 0b00000010]
    assert not bits[1].any()
    with pytest.raises(ValueError):
        octattn.pack_tree(np.zeros((3, 4), bool))


@pytest.mark.parametrize("algorithm", ["fused", "naive", "reference"])
def test_tree_gives_the_mask_tensors_bytes(algorithm):
    rng = np.random.default_rng(1)
    q, k, v, kept, mask = problem(rng)
    o, lse = octattn.attention(q, k, v, tree=octattn.pack_tree(kept), return_lse=True,
                               algorithm=algorithm)
    mo, mlse = octattn.attention(q, k, v, mask=mask, return_lse=True, algorithm=algorithm)
    assert same_bytes(o, mo) and same_bytes(lse, mlse)
    # The tree matters: without it each row reads its causal tree columns too.
    plain = octattn.attention(q, k, v, algorithm=algorithm)
    assert not same_bytes(o, plain)


def test_one_tree_for_every_entry_and_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    q, k, v, kept, mask = problem(rng, B=3)
    one = octattn.pack_tree(torch.from_numpy(kept[0]))  # [n, bytes]: every entry's tree
    assert one.dtype == torch.uint8
    mask[:, 0, :, 40:] = kept[0]
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    o = octattn.attention(tq, tk, tv, tree=one)
    assert same_bytes(o, octattn.attention(tq, tk, tv, mask=torch.from_numpy(mask)))
    # [B, n, bytes] as an expanded view (stride 0) is the same tree again.
    o3 = octattn.attention(tq, tk, tv, tree=one.unsqueeze(0).expand(3, -1, -1))
    assert same_bytes(o, o3)


def test_backward_over_a_tree():
    rng = np.random.default_rng(3)
    q, k, v, kept, mask = problem(rng)
    bits = octattn.pack_tree(kept)
    o, lse = octattn.attention(q, k, v, tree=bits, return_lse=True)
    dout = rng.standard_normal(o.shape, dtype=np.float32)
    grads = octattn.attention_backward(q, k, v, o, lse, dout, tree=bits)
    mgrads = octattn.attention_backward(q, k, v, o, lse, dout, mask=mask)
    for g, m in zip(grads, mgrads):
        assert same_bytes(g, m)


def test_ragged_trees():
    rng = np.random.default_rng(4)
    H, Hkv, D = 4, 2, 16
    ns, prefixes = [3, 11, 1], [20, 0, 7]
    cu_q = np.cumsum([0] + ns).astype(np.int64)
    cu_k = np.cumsum([0] + [p + n for p, n in zip(prefixes, ns)]).astype(np.int64)
    q = rng.standard_normal((cu_q[-1], H, D), dtype=np.float32)
    k = rng.standard_normal((cu_k[-1], Hkv, D), dtype=np.float32)
    v = rng.standard_normal((cu_k[-1], Hkv, D), dtype=np.float32)
    trees = [random_tree(n, rng) for n in ns]
    rows = np.zeros((cu_q[-1], 2), np.uint8)  # each row's bits over its own sequence's tree
    for s, t in enumerate(trees):
        rows[cu_q[s]:cu_q[s + 1], :] = np.pad(octattn.pack_tree(t), ((0, 0), (0, 1)))[:, :2]
    o = octattn.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, tree=rows)
    for s, t in enumerate(trees):
        qs = q[cu_q[s]:cu_q[s + 1]].transpose(1, 0, 2)[None]
        ks = k[cu_k[s]:cu_k[s + 1]].transpose(1, 0, 2)[None]
        vs = v[cu_k[s]:cu_k[s + 1]].transpose(1, 0, 2)[None]
        own = octattn.attention(np.ascontiguousarray(qs), np.ascontiguousarray(ks),
                                np.ascontiguousarray(vs), tree=octattn.pack_tree(t))
        assert same_bytes(o[cu_q[s]:cu_q[s + 1]], own[0].transpose(1, 0, 2))


def test_bad_trees():
    rng = np.random.default_rng(5)
    q, k, v, kept, mask = problem(rng)
    bits = octattn.pack_tree(kept)
    with pytest.raises(TypeError):
        octattn.attention(q, k, v, tree=bits.astype(np.int32))
    with pytest.raises(TypeError):
        octattn.attention(q, k, v, tree=bits[:, :, :1][:, ::2])
    with pytest.raises(octattn.Error, match="options.mask"):
        octattn.attention(q, k, v, tree=bits, mask=mask)
    with pytest.raises(octattn.Error, match="tree_row_bytes"):
        octattn.attention(q, k, v, tree=np.zeros((2, 13, 1), np.uint8))  # 8 bits, 13 rows
