"""octattn: SIMD CPU attention kernels, on numpy arrays and PyTorch tensors.

    import octattn
    o = octattn.attention(q, k, v)                  # causal, q/k/v [B, H, T, D]
    o, lse = octattn.attention(q, k, v, window=256, return_lse=True)

Arrays of any strides are read in place (numpy arrays, torch CPU tensors, any DLPack
producer); the output is allocated like q (or written into `out`). Every option of the C
API is a keyword; failures raise octattn.Error with the library's status and message.
Semantics, accuracy and determinism are those of include/octattn.h.
"""
from numpy import ndarray as _ndarray

from . import _octattn

__all__ = [
    "Context", "Error", "attention", "workspace_size", "scores", "scale", "mask",
    "modify_scores", "softmax", "weighted_sum", "split_heads", "merge_heads", "split_qkv",
    "merge", "attention_backward", "kv_store", "pack_tree", "block_mask", "set_threads", "get_threads", "set_target", "last_run", "available_targets",
    "version", "STATUS",
]

version = _octattn.version()
__version__ = version

# Status codes of include/octattn.h, by name.
STATUS = {
    "OK": 0, "NULL_POINTER": 1, "INVALID_SHAPE": 2, "INVALID_STRIDE": 3, "OVERFLOW": 4,
    "ALIASING": 5, "INVALID_OPTION": 6, "STRUCT_SIZE": 7, "WORKSPACE_TOO_SMALL": 8,
    "UNSUPPORTED": 9, "OUT_OF_MEMORY": 10, "MISALIGNED": 11, "INTERNAL": 12,
}
_STATUS_NAME = {v: k for k, v in STATUS.items()}
_ALGORITHMS = {"auto": 0, "reference": 1, "naive": 2, "fused": 3}
_BACKENDS = {"auto": 0, "highway": 1, "xsimd": 2}
_TARGETS = {"auto": 0, "scalar": 1, "sse2": 2, "ssse3": 3, "sse4": 4, "avx2": 5, "avx512": 6,
            "neon": 7, "sve2_128": 8, "sve_256": 9,
            "avx512_bf16": 10, "amx_bf16": 11}


class Error(RuntimeError):
    """A failed library call: `status` (int), `status_name` (e.g. "INVALID_SHAPE") and
    `message` (the library's text)."""

    def __init__(self, status, message):
        self.status = int(status)
        self.status_name = _STATUS_NAME.get(self.status, str(self.status))
        self.message = message
        super().__init__(f"{self.status_name}: {message}")


_octattn._set_error_class(Error)


def _check_layouts():
    """The extension's view of every public struct is the library's (octattn_struct_layout)."""
    for name, size in (("octattn_tensor", _octattn.sizeof_tensor()),
                       ("octattn_attention_options", _octattn.sizeof_options()),
                       ("octattn_run_info", _octattn.sizeof_run_info())):
        got = _octattn.struct_layout(name, None)
        if got != size:
            raise ImportError(f"octattn: {name} is {got} bytes in the library, {size} in the "
                              "extension: rebuild the package against this library")


_check_layouts()


class Context(_octattn.Context):
    """A thread cap, a backend/target choice and scratch memory, reused across calls. One
    context must not be used by two threads at once; the module functions use one
    context per Python thread."""

    def set_target(self, backend="auto", target="auto"):
        super().set_target(_BACKENDS[backend], _TARGETS[target])


def _context():
    """This Python thread's default context (owned by the extension, one per thread)."""
    return _octattn._default_context()


def set_threads(threads):
    """Caps the threads of this Python thread's calls (0: all hardware threads). Without
    it, calls on torch tensors follow torch.get_num_threads() and others use the
    library's default (OCTATTN_THREADS, else every hardware thread)."""
    _context().set_threads(int(threads))


def get_threads():
    return _context().threads()


def set_target(backend="auto", target="auto"):
    """Chooses the backend ("highway", "xsimd") and target ("avx2", ...) of this Python
    thread's calls; "auto" picks the best this CPU runs."""
    _context().set_target(_BACKENDS[backend], _TARGETS[target])


def last_run():
    """What the last call on this Python thread ran: algorithm, backend, target, threads."""
    return _context().last_run()


def available_targets(backend="highway"):
    return _octattn.available_targets(_BACKENDS[backend])


_is_torch = _octattn._is_torch  # a torch.Tensor (once torch is imported)


def _ctx_for(x, context):
    """The context of a call on x: the caller's, or this thread's default one, whose
    thread cap follows torch.get_num_threads() for torch tensors unless set_threads was
    called."""
    if context is not None:
        return context
    ctx = _context()
    if type(x) is not _ndarray and _is_torch(x):
        import torch
        ctx.follow_threads(torch.get_num_threads())
    return ctx


def _empty(like, shape, dtype=None):
    """An uninitialized array of `shape`, of like's kind (torch or numpy)."""
    if _is_torch(like):
        import torch
        return like.new_empty(shape, dtype=dtype if dtype is not None else torch.float32)
    import numpy as np
    return np.empty(shape, dtype=dtype if dtype is not None else np.float32)


def _per_head(a, like):
    """ALiBi slopes and sinks as contiguous float32 arrays of one kind with q."""
    if a is None:
        return None
    if _is_torch(a):
        import torch
        return a.detach().to(dtype=torch.float32).contiguous()
    import numpy as np
    return np.ascontiguousarray(a, dtype=np.float32)


# o = softmax(scale * q k^T + M) v: the extension's entry, keywords parsed in C++ (a
# Python wrapper cost about 1.5 us a call); help(octattn.attention) has its text.
attention = _octattn.attention
# Rows into a KV cache of any dtype, quantized ones included (help(octattn.kv_store)).
kv_store = _octattn.kv_store


def pack_tree(kept):
    """The packed bits of a tree mask for attention(..., tree=): kept, a bool array [..., n,
    n] (numpy or torch; kept[i, c]: row i reads tree column c, its ancestors and itself),
    to uint8 [..., n, ceil(n / 8)], bit c of row i at bit c % 8 of byte c // 8."""
    import numpy as np
    if _is_torch(kept):
        import torch
        return torch.from_numpy(pack_tree(kept.detach().cpu().numpy()))
    kept = np.asarray(kept)
    if kept.dtype != np.bool_ or kept.ndim < 2 or kept.shape[-1] != kept.shape[-2]:
        raise ValueError("pack_tree takes a bool array [..., n, n]")
    return np.ascontiguousarray(np.packbits(kept, axis=-1, bitorder="little"))


def block_mask(bm, q_len=None, kv_len=None):
    """A torch flex_attention BlockMask as keywords of attention() and attention_backward():
    {"blocks": (counts, indices, full_counts, full_indices, block_q, block_kv), "mask": bits}.

    Its tensors are read in place (int32, any strides). Its mask_mod is evaluated once,
    over the partial blocks only, into a bool mask [B, H, Tq, Tk] (None without partial
    blocks or with flex's noop_mask); the call reads those bits in the partial blocks and
    never in the full ones. q_len and kv_len default to the BlockMask's seq_lengths. The
    call's own mask options apply on top: pass causal=False unless they should.
        o = octattn.attention(q, k, v, causal=False, **octattn.block_mask(bm))
    """
    import torch
    from torch.nn.attention.flex_attention import noop_mask
    bq, bkv = bm.BLOCK_SIZE
    if q_len is None or kv_len is None:
        q_len, kv_len = bm.seq_lengths
    counts, indices = bm.kv_num_blocks, bm.kv_indices
    blocks = (counts, indices, bm.full_kv_num_blocks, bm.full_kv_indices, int(bq), int(bkv))
    mask = None
    if bm.mask_mod is not noop_mask and bool((counts > 0).any()):
        mask = torch.zeros(counts.shape[0], counts.shape[1], q_len, kv_len, dtype=torch.bool)
        listed = torch.arange(indices.shape[-1]) < counts[..., None].to(torch.int64)
        b, h, qb, x = listed.nonzero(as_tuple=True)
        kb = indices[b, h, qb, x].to(torch.int64)
        qi = qb[:, None] * bq + torch.arange(bq)  # [P, bq]
        ki = kb[:, None] * bkv + torch.arange(bkv)  # [P, bkv]
        inside = (qi[:, :, None] < q_len) & (ki[:, None, :] < kv_len)
        qc, kc = qi.clamp(max=q_len - 1), ki.clamp(max=kv_len - 1)
        keep = bm.mask_mod(b[:, None, None], h[:, None, None], qc[:, :, None], kc[:, None, :])
        keep = torch.broadcast_to(keep, inside.shape) & inside
        sel = inside.nonzero(as_tuple=True)
        mask[b[sel[0]], h[sel[0]], qc[sel[0], sel[1]], kc[sel[0], sel[2]]] = keep[sel]
    return {"blocks": blocks, "mask": mask}


def attention_backward(q, k, v, o, lse, dout, dlse=None, *, causal=True, window=0, stride=0, scale=None,
                       q_start=None, k_start=0, chunk=0, softcap=0.0, alibi_slopes=None,
                       sinks=None, bias=None, mask=None, return_dsinks=False,
                       return_dbias=False, algorithm="auto", layout="bhtd", context=None,
                       q_starts=None, kv_starts=None, kv_lens=None, tree=None, blocks=None,
                       key_indices=None, key_counts=None, key_indices2=None, key_counts2=None):
    """The gradients of octattn.attention (octattn_attention_backward, include/octattn.h).

    q, k, v and the options as the forward call had them; o and lse ([B, Hq, Tq]) as it
    returned them; dout = dL/do (the shape of o), dlse = dL/dlse (None: zero). Returns (dq, dk, dv), then dsinks [Hq]
    (return_dsinks, with sinks) and dbias [B, Hq, Tq, Tk] (return_dbias: the gradient of
    the scores, that is of a bias tensor before any broadcast) as asked. The gradients
    are new float32 arrays of q's kind in q's layout (q, k, v, o and dout may be float32,
    bfloat16 or float16: the float32 gradients of their values). algorithm: "auto"/"fused" or "reference".
    q_starts, kv_starts, kv_lens: a padded batch's sequences, tree (octattn.pack_tree),
    blocks (octattn.block_mask) and key lists (key_indices ...: token-sparse attention), as
    the forward call had them.
    """
    ctx = _ctx_for(q, context)
    bthd = layout == "bthd"
    if not bthd and layout != "bhtd":
        raise ValueError("layout is 'bhtd' or 'bthd'")
    dq = _empty(q, tuple(q.shape))
    dk = _empty(q, tuple(k.shape))
    dv = _empty(q, tuple(v.shape))
    s = q.shape
    heads, rows = (s[2], s[1]) if bthd else (s[1], s[2])
    dsinks = _empty(q, (heads,)) if return_dsinks else None
    dbias = None
    if return_dbias:
        dbias = _empty(q, (s[0], heads, rows, k.shape[1] if bthd else k.shape[2]))
    ctx.backward(q, k, v, o, lse, dout, dlse, dq, dk, dv, dsinks, dbias, bthd, bool(causal), window,
                 stride, q_start, k_start, scale, chunk, float(softcap),
                 _per_head(alibi_slopes, q), _per_head(sinks, q), bias, mask,
                 _ALGORITHMS[algorithm], q_starts, kv_starts, kv_lens, tree, blocks,
                 key_indices, key_counts, key_indices2, key_counts2)
    out = (dq, dk, dv)
    if return_dsinks:
        out += (dsinks,)
    if return_dbias:
        out += (dbias,)
    return out


def workspace_size(q, k, v, *, causal=True, window=0, stride=0, q_start=None, k_start=0,
                   chunk=0, algorithm="auto", layout="bhtd", context=None):
    """Bytes of scratch octattn_attention needs for this call (the context allocates
    and keeps it)."""
    ctx = _ctx_for(q, context)
    bthd = layout == "bthd"
    s = q.shape
    o = _empty(q, (s[0], s[1], s[2], v.shape[3]))
    return ctx.workspace_size(q, k, v, o, bthd, bool(causal), window, stride, q_start, k_start,
                              chunk, _ALGORITHMS[algorithm])


_octattn._set_helpers(__import__("numpy").empty, _per_head)


# ----------------------------------------------------------------------- the stages
def scores(q, k, *, out=None, context=None):
    """q k^T (unscaled) [B, Hq, Tq, Tk], with the GQA rule."""
    if out is None:
        out = _empty(q, (q.shape[0], q.shape[1], q.shape[2], k.shape[2]))
    _ctx_for(q, context).scores(q, k, out)
    return out


def scale(s, factor, *, context=None):
    """s *= factor, in place; returns s."""
    _ctx_for(s, context).scale(s, float(factor))
    return s


def mask(s, *, causal=True, window=0, stride=0, q_start=None, k_start=0, chunk=0,
         mask=None, key_indices=None, key_counts=None, key_indices2=None, key_counts2=None,
         context=None):
    """Sets the masked scores to -inf, in place; returns s. key_indices ...: key lists as
    attention takes them (their head dimension 1 or a divisor of s's heads)."""
    _ctx_for(s, context).mask(s, bool(causal), window, stride, q_start, k_start, chunk, mask,
                              key_indices, key_counts, key_indices2, key_counts2)
    return s


def modify_scores(s, *, q_start=None, k_start=0, softcap=0.0, alibi_slopes=None, bias=None,
                  context=None):
    """Softcap, ALiBi and bias applied to scaled scores, in place; returns s."""
    _ctx_for(s, context).modify_scores(s, q_start, k_start, softcap,
                                       _per_head(alibi_slopes, s), bias)
    return s


def softmax(s, *, sinks=None, return_lse=False, context=None):
    """Row-wise stable softmax of s, in place; returns s (and lse [B, H, T])."""
    lse = _empty(s, tuple(s.shape[:3])) if return_lse else None
    _ctx_for(s, context).softmax(s, _per_head(sinks, s), lse)
    return (s, lse) if return_lse else s


def weighted_sum(w, v, *, out=None, context=None):
    """w v [B, Hq, Tq, Dv], with the GQA rule."""
    if out is None:
        out = _empty(w, (w.shape[0], w.shape[1], w.shape[2], v.shape[3]))
    _ctx_for(w, context).weighted_sum(w, v, out)
    return out


def split_heads(x, heads, *, out=None, context=None):
    """[B, T, C] -> [B, heads, T, C / heads] (a byte-exact copy, in x's dtype)."""
    B, T, C = x.shape
    if out is None:
        out = _empty(x, (B, heads, T, C // heads), x.dtype)
    _ctx_for(x, context).split_heads(x, heads, out)
    return out


def merge_heads(x, *, out=None, context=None):
    """[B, H, T, D] -> [B, T, H * D]."""
    B, H, T, D = x.shape
    if out is None:
        out = _empty(x, (B, T, H * D), x.dtype)
    _ctx_for(x, context).merge_heads(x, out)
    return out


def split_qkv(x, q_heads, kv_heads, *, context=None):
    """A packed [B, T, (Hq + 2 Hkv) D] projection -> q [B, Hq, T, D], k, v [B, Hkv, T, D]."""
    B, T, C = x.shape
    D = C // (q_heads + 2 * kv_heads)
    q = _empty(x, (B, q_heads, T, D), x.dtype)
    k = _empty(x, (B, kv_heads, T, D), x.dtype)
    v = _empty(x, (B, kv_heads, T, D), x.dtype)
    _ctx_for(x, context).split_qkv(x, q_heads, kv_heads, q, k, v)
    return q, k, v


def merge(o_parts, lse_parts, *, out=None, return_lse=False, context=None):
    """Combines partial outputs over key shards by their LSE (octattn_merge)."""
    o0 = o_parts[0]
    if out is None:
        out = _empty(o0, tuple(o0.shape))
    lse = _empty(o0, tuple(o0.shape[:3])) if return_lse else None
    _ctx_for(o0, context).merge(list(o_parts), list(lse_parts), out, lse)
    return (out, lse) if return_lse else out

