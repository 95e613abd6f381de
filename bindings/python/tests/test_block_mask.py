"""Block masks from Python (attention(..., blocks=), octattn.block_mask): a torch
flex_attention BlockMask read in place, its mask_mod evaluated into the partial blocks'
bits; forward and backward against PyTorch on the dense mask of the same pairs; the
bytes of the mask tensor of those pairs; and the errors."""
import numpy as np
import pytest

import octattn

torch = pytest.importorskip("torch")
flex = pytest.importorskip("torch.nn.attention.flex_attention")


def same_bytes(a, b):
    a, b = (np.asarray(x.detach() if hasattr(x, "detach") else x) for x in (a, b))
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def documents(T, docs):
    """flex's document packing: docs equal documents, causal inside each."""
    doc = torch.arange(T) // (T // docs)

    def mask_mod(b, h, q, kv):
        return (doc[q] == doc[kv]) & (q >= kv)

    return mask_mod


def dense(mask_mod, B, H, Tq, Tk):
    b = torch.arange(B)[:, None, None, None]
    h = torch.arange(H)[None, :, None, None]
    q = torch.arange(Tq)[None, None, :, None]
    kv = torch.arange(Tk)[None, None, None, :]
    return torch.broadcast_to(mask_mod(b, h, q, kv), (B, H, Tq, Tk))


def qkv(B, Hq, Hkv, T, D, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, h, T, D, generator=g) for h in (Hq, Hkv, Hkv)]


@pytest.mark.parametrize("T,docs,block", [(512, 4, 128), (384, 3, 64), (200, 2, 32)])
def test_documents_match_torch_forward_and_backward(T, docs, block):
    B, Hq, Hkv, D = 2, 4, 2, 32
    mask_mod = documents(T, docs)
    bm = flex.create_block_mask(mask_mod, None, None, T, T, device="cpu", BLOCK_SIZE=block)
    q, k, v = qkv(B, Hq, Hkv, T, D)
    kw = octattn.block_mask(bm)
    o, lse = octattn.attention(q, k, v, causal=False, return_lse=True, **kw)
    allowed = dense(mask_mod, 1, 1, T, T)
    kr, vr = (x.repeat_interleave(Hq // Hkv, dim=1) for x in (k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(q, kr, vr, attn_mask=allowed)
    assert (o - ref).abs().max() < 1e-5
    # The backward over the same lists: PyTorch's gradients of the dense-mask call.
    dout = torch.randn_like(o)
    dq, dk, dv = octattn.attention_backward(q, k, v, o, lse, dout, causal=False, **kw)
    qt, kt, vt = (x.clone().requires_grad_() for x in (q, k, v))
    rt = torch.nn.functional.scaled_dot_product_attention(
        qt, kt.repeat_interleave(Hq // Hkv, dim=1), vt.repeat_interleave(Hq // Hkv, dim=1),
        attn_mask=allowed)
    rt.backward(dout)
    for mine, theirs in ((dq, qt.grad), (dk, kt.grad), (dv, vt.grad)):
        assert (mine - theirs).abs().max() < 1e-4


def test_block_mask_gives_the_mask_tensors_bytes():
    T, B, Hq, Hkv, D = 256, 1, 2, 1, 16
    mask_mod = documents(T, 2)
    bm = flex.create_block_mask(mask_mod, None, None, T, T, device="cpu", BLOCK_SIZE=64)
    q, k, v = qkv(B, Hq, Hkv, T, D, seed=3)
    o = octattn.attention(q, k, v, causal=False, **octattn.block_mask(bm))
    mo = octattn.attention(q, k, v, causal=False, mask=dense(mask_mod, 1, 1, T, T).contiguous())
    assert same_bytes(o, mo)


def test_per_head_lists_and_noop_mask():
    """A BlockMask from its lists (from_kv_blocks): every block full, per head, and no
    mask_mod to evaluate."""
    B, H, T, D, bs = 1, 2, 128, 16, 32
    nb = T // bs
    counts = torch.zeros(B, H, nb, dtype=torch.int32)
    indices = torch.zeros(B, H, nb, nb, dtype=torch.int32)
    kept = torch.zeros(B, H, T, T, dtype=torch.bool)
    for h in range(H):
        for x in range(nb):
            listed = [y for y in range(nb) if (x + y + h) % 2 == 0 or y == x]
            counts[0, h, x] = len(listed)
            indices[0, h, x, :len(listed)] = torch.tensor(listed, dtype=torch.int32)
            for y in listed:
                kept[0, h, x * bs:(x + 1) * bs, y * bs:(y + 1) * bs] = True
    bm = flex.BlockMask.from_kv_blocks(torch.zeros_like(counts), indices, counts, indices,
                                       BLOCK_SIZE=bs)
    kw = octattn.block_mask(bm, T, T)
    assert kw["mask"] is None  # no partial block: mask_mod never evaluated
    q, k, v = qkv(B, H, H, T, D, seed=5)
    o = octattn.attention(q, k, v, **kw)  # causal on top of the lists
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=kept & torch.ones(T, T, dtype=torch.bool).tril())
    assert (o - ref).abs().max() < 1e-5


def test_bad_block_lists():
    T, bs = 128, 32
    q, k, v = qkv(1, 2, 2, T, 16)
    counts = torch.ones(1, 1, T // bs, dtype=torch.int32)
    indices = torch.zeros(1, 1, T // bs, 2, dtype=torch.int32)
    indices[0, 0, 1, 0] = T // bs  # past the key blocks
    with pytest.raises(octattn.Error, match="outside the 4 key blocks"):
        octattn.attention(q, k, v, blocks=(counts, indices, None, None, bs, bs))
    with pytest.raises(TypeError):
        octattn.attention(q, k, v, blocks=(counts, indices.to(torch.int64), None, None, bs, bs))
    with pytest.raises(TypeError):
        octattn.attention(q, k, v, blocks=(counts, indices))
