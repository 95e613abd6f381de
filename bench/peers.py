"""octattn and its peers on the same shapes, in the same run, as JSON lines.

    python3 bench/peers.py --q-len 512,2048 --head-dim 64,128 [--q-heads 32 --kv-heads 8]
        [--threads 1] [--window W [--stride S]] [--mod MOD] [--rounds 3] [--ggml-lib DIR]
        [--check] [--backward] [--dtype bf16] [--target amx_bf16]
        [--value-dim N [--v-of-k]] [--index-topk K]

--mod runs one score modifier (octattn's `bench` flag of the same name), and the peers
with its equivalent: softcap=X, alibi, sinks, chunk=N, mask_tensor (a boolean mask equal
to the causal one, passed explicitly), bias_tensor (a broadcast [Tq, Tk] f32 bias).
PyTorch's SDPA takes alibi, chunk, mask_tensor and bias_tensor as its explicit mask
(boolean, or float with -inf: the additive mask); softcap and sinks have no SDPA form,
so torch_sdpa computes them by hand (tanh, or an extra logit column dropped after the
softmax). ggml takes softcap, alibi (max_bias 8: the same slopes for a power of two of
heads) and the masks (in its f16 mask); ONNX Runtime's GQA runs none of them here.

Peers, where installed:
- octattn: `octattn bench` (--octattn PATH, default build/release/tools/octattn), fused,
  on the target auto picks or --target's (amx_bf16, which auto never picks).
- torch_sdpa: PyTorch scaled_dot_product_attention on CPU (is_causal, or an explicit
  boolean mask for windows; GQA through repeat_interleave, as its CPU kernel needs).
- onnxruntime_gqa: ONNX Runtime's GroupQueryAttention contrib op (com.microsoft), f32,
  a one-node model; causal, local_window_size = W for windows (no strided columns,
  q_len == kv_len only).
- ggml_flash: ggml's flash_attn_ext with f32 K and V and an f16 mask (0 / -inf), through
  ctypes from a ggml that the caller built (--ggml-lib: the folder with libggml-base.so
  and libggml-cpu.so, or OCTATTN_GGML_LIB); f16 K/V with --dtype or --kv-dtype f16, and
  its own q8_0 and q4_0 caches with --kv-dtype q8_0 or q4_0 (llama.cpp's -ctk/-ctv: the
  blocks quantized by octattn.kv_store, which writes ggml's bytes).
- torch_by_hand, numpy_by_hand: matmul, mask, softmax, matmul (not in the default list).
- torch_mla: the explicit math of MLA's absorbed attention as DeepSeek's reference code
  runs it: each kv head's query heads (and rows) stacked as the rows of one matmul against
  its (latent) key rows, mask, softmax in f32, matmul with the value rows, in --dtype (bf16
  matmuls with --dtype bf16); no copies of k or v. With --value-dim (v [.., value_dim])
  and --v-of-k (v a view of k's first value_dim columns: MLA's latent rows, 576/512),
  the default peers are octattn, torch_mla and torch_sdpa.
- With --block-mask documents:N (N equal documents packed in the sequence, causal inside
  each): octattn takes it as a block mask (`bench --block-mask`), octattn_dense_mask as
  the bool mask tensor of the same pairs, torch_sdpa as that explicit mask, and
  torch_flex runs PyTorch's flex_attention compiled by torch.compile with the BlockMask of
  create_block_mask (128 x 128 blocks; forward only: its CPU backward is not
  implemented).
- With --index-topk K (token-sparse attention, DeepSeek's DSA: each query row reads K
  random keys of those the mask allows, one list a row for every head), octattn takes the
  lists as key_indices (`bench --index-topk`), torch_mla gathers each row's K key (and
  value) rows and runs the explicit math on them, and torch_sdpa runs SDPA on the
  gathered rows (enable_gqa: the kv head's query heads against its rows); the default
  peers are those three. GFLOP/s count the listed pairs.
With --backward the timed call is the backward of the attention (octattn: `bench
--backward`; torch_sdpa: torch.autograd.grad of SDPA's output, its graph built once and
retained, so only the backward is timed; the other peers have no backward) and GFLOP/s
count 2 * (3 * head_dim + 2 * value_dim) per allowed pair (the recomputed q k^T, dP, dV,
dQ and dK).
Every case runs in a fresh process; each round runs every shape with every peer, so that
the machine's noise hits all of them alike. One line per case and round, then one
"summary" line per case: each peer's best round and octattn's GFLOP/s over the peer's
(`octattn_ratio`). GFLOP/s counts useful work only, as octattn does: 2 * (head_dim +
value_dim) per allowed pair (value_dim: --value-dim, else head_dim).
"""
import argparse
import ctypes
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def modifier(args):
    """(name, value) of --mod: ("", 0) without one."""
    if not args.mod:
        return "", 0
    name, _, value = args.mod.partition("=")
    if name not in ("softcap", "alibi", "sinks", "chunk", "mask_tensor", "bias_tensor"):
        raise SystemExit(f"unknown modifier {name}")
    return name, float(value) if value else 0


def mask(q_len, kv_len, window, stride, np, chunk=0, documents=0):
    """The allowed (query, key) pairs, bottom-right aligned, as a boolean array."""
    rows = np.arange(q_len)[:, None] + (kv_len - q_len)
    cols = np.arange(kv_len)[None, :]
    d = rows - cols
    allowed = d >= 0
    if window:
        local = d < window
        if stride:
            local = local | (cols % stride == 0)
        allowed = allowed & local
    if chunk:
        allowed = allowed & (rows // chunk == cols // chunk)
    if documents:
        size = kv_len // documents
        allowed = allowed & (rows // size == cols // size)
    return allowed


def documents(args):
    """N of --block-mask documents:N (0 without one)."""
    if not args.block_mask:
        return 0
    kind, _, n = args.block_mask.partition(":")
    if kind != "documents" or not n.isdigit():
        raise SystemExit("--block-mask takes documents:N here")
    return int(n)


def top_keys(args, q_len, kv_len):
    """--index-topk: [q_len, K] int64, each row's K distinct keys of those the mask allows
    (all of them, then -1, where it allows fewer), seeded."""
    import numpy as np
    m = mask(q_len, kv_len, args.window, args.stride, np)
    rng = np.random.default_rng(17)
    idx = np.full((q_len, args.index_topk), -1, np.int64)
    for i in range(q_len):
        allowed = np.flatnonzero(m[i])
        pick = rng.permutation(allowed)[:args.index_topk]
        idx[i, :len(pick)] = pick
    return idx


def allowed_pairs(args, q_len, kv_len):
    import numpy as np
    if args.index_topk:
        return int((top_keys(args, q_len, kv_len) >= 0).sum())
    name, value = modifier(args)
    return int(mask(q_len, kv_len, args.window, args.stride, np,
                    int(value) if name == "chunk" else 0, documents(args)).sum())


def mod_arrays(args, q_len, kv_len, np):
    """The modifier's data, as octattn's bench makes it: ALiBi slopes, sinks, a bias."""
    rng = np.random.default_rng(1)
    h = args.q_heads
    slopes = np.array([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)], np.float32)
    sinks = rng.uniform(-1, 1, h).astype(np.float32)
    bias = rng.uniform(-1, 1, (q_len, kv_len)).astype(np.float32)
    return slopes, sinks, bias


def value_dim(args, dim):
    return args.value_dim or dim


def inputs(args, q_len, kv_len, dim):
    """q, k, v (v [.., value_dim], with --v-of-k a view of k's first value_dim columns)."""
    import numpy as np
    rng = np.random.default_rng(0)
    kv_heads = args.kv_heads or args.q_heads
    q = rng.uniform(-1, 1, (args.batch, args.q_heads, q_len, dim)).astype(np.float32)
    k = rng.uniform(-1, 1, (args.batch, kv_heads, kv_len, dim)).astype(np.float32)
    dv = value_dim(args, dim)
    if args.v_of_k:
        return q, k, k[..., :dv]
    v = rng.uniform(-1, 1, (args.batch, kv_heads, kv_len, dv)).astype(np.float32)
    return q, k, v


def torch_call(peer, args, q_len, kv_len, dim):
    import numpy as np
    import torch
    torch.set_num_threads(args.threads)
    q, k, v = (torch.from_numpy(x) for x in inputs(args, q_len, kv_len, dim))
    # --dtype: q, k, v (and o) in bf16 or f16, SDPA's own kernel for them; --kv-dtype: a
    # 16-bit cache that SDPA cannot mix with f32 queries, widened on every call as a
    # caller must.
    to = {"bf16": torch.bfloat16, "f16": torch.float16}
    if args.dtype != "f32":
        q, k, v = (x.to(to[args.dtype]) for x in (q, k, v))
    kv_cache = None
    quant = None  # --kv-dtype int8, fp8_*: PyTorch's dequantize-then-SDPA on each call
    if args.kv_dtype in ("int8", "fp8_e4m3", "fp8_e5m2"):
        if args.dtype != "f32" or args.backward:
            raise SystemExit("torch: a quantized --kv-dtype with f32 queries (forward) only")
        if args.kv_dtype == "int8":  # absmax per token and group of --kv-group channels
            G = args.kv_group

            def int8(x):
                s = x.reshape(*x.shape[:3], -1, G).abs().amax(-1) / 127
                i = torch.round(x / s.repeat_interleave(G, -1)).clamp(-127, 127)
                return i.to(torch.int8), s
            quant = (int8(k), int8(v))
        else:
            dt = torch.float8_e4m3fn if args.kv_dtype == "fp8_e4m3" else torch.float8_e5m2
            quant = ((k.to(dt), None), (v.to(dt), None))
    elif args.kv_dtype in ("q8_0", "q4_0"):
        raise SystemExit("torch: no ggml block caches")
    elif args.kv_dtype not in ("", "f32", args.dtype):
        if args.dtype != "f32" or args.backward:
            raise SystemExit("torch: --kv-dtype with f32 queries (forward) only")
        kv_cache = (k.to(to[args.kv_dtype]), v.to(to[args.kv_dtype]))
    if args.v_of_k:  # the view again, after any conversion of k
        v = k[..., :value_dim(args, dim)]
    group = args.q_heads // (args.kv_heads or args.q_heads)
    if args.index_topk:
        return torch_sparse_call(peer, args, q, k, v, q_len, kv_len, dim, group)
    if peer == "torch_mla":
        return torch_mla_call(args, q, k, v, q_len, kv_len, dim, group)
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    name, value = modifier(args)
    docs = documents(args)
    m = torch.from_numpy(mask(q_len, kv_len, args.window, args.stride, np,
                              int(value) if name == "chunk" else 0, docs))
    square = q_len == kv_len and not args.window and not name and not docs
    if peer == "torch_flex":
        if not docs or name or args.window or args.backward or q_len != kv_len:
            raise SystemExit("torch_flex: --block-mask documents:N forward, q_len = kv_len only")
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        doc = torch.arange(kv_len) // (kv_len // docs)

        def doc_causal(b, h, qi, ki):
            return (doc[qi] == doc[ki]) & (qi >= ki)
        bm = create_block_mask(doc_causal, None, None, q_len, kv_len, device="cpu")
        flex = torch.compile(flex_attention)

        def flex_call():
            with torch.no_grad():
                return flex(q, k, v, block_mask=bm)
        return flex_call
    F = torch.nn.functional
    slopes, sinks, bias = (torch.from_numpy(x) for x in mod_arrays(args, q_len, kv_len, np))
    if name in ("alibi", "bias_tensor"):  # SDPA's additive float mask
        if name == "alibi":
            rows = torch.arange(q_len).view(q_len, 1) + (kv_len - q_len)
            add = slopes.view(-1, 1, 1) * (torch.arange(kv_len).view(1, kv_len) - rows)
        else:
            add = bias
        m = add.masked_fill(~m, float("-inf"))
    by_hand = peer != "torch_sdpa" or name in ("softcap", "sinks")
    if args.backward:
        if by_hand or name:
            raise SystemExit("--backward: torch_sdpa without modifiers only")
        q, k, v = (x.clone().requires_grad_(True) for x in (q, k, v))
        o = (F.scaled_dot_product_attention(q, k, v, is_causal=True) if square
             else F.scaled_dot_product_attention(q, k, v, attn_mask=m))
        dout = torch.from_numpy(np.random.default_rng(1).uniform(
            -1, 1, tuple(o.shape)).astype(np.float32))

        def backward():
            return torch.autograd.grad(o, (q, k, v), dout, retain_graph=True)
        return backward

    def call():
        nonlocal k, v
        with torch.no_grad():
            if quant is not None:
                k, v = (x.float() if s is None else x.float() * s.repeat_interleave(
                    args.kv_group, -1) for x, s in quant)
                if group > 1:
                    k = k.repeat_interleave(group, dim=1)
                    v = v.repeat_interleave(group, dim=1)
            if kv_cache is not None:
                k, v = (x.float() for x in kv_cache)
                if group > 1:
                    k = k.repeat_interleave(group, dim=1)
                    v = v.repeat_interleave(group, dim=1)
            if not by_hand:
                if square:
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                return F.scaled_dot_product_attention(q, k, v, attn_mask=m)
            s = (q @ k.transpose(-2, -1)) / dim ** 0.5
            if name == "softcap":
                s = value * torch.tanh(s / value)
            if m.dtype == torch.bool:
                s = s.masked_fill(~m, float("-inf"))
            else:
                s = s + m
            if name == "sinks":
                col = sinks.view(1, -1, 1, 1).expand(s.shape[0], -1, q_len, 1)
                return torch.cat([s, col], dim=-1).softmax(dim=-1)[..., :kv_len] @ v
            return s.softmax(dim=-1) @ v
    return call


def torch_mla_call(args, q, k, v, q_len, kv_len, dim, group):
    """MLA's absorbed attention as explicit matmuls: [B, Hkv, group * Tq, D] rows against
    each kv head's [Tk, D] keys (no copies), the mask repeated over the group, softmax in
    f32, the weights in v's dtype times [Tk, Dv]."""
    import numpy as np
    import torch
    if args.mod or args.block_mask or args.backward or args.kv_dtype not in ("", args.dtype):
        raise SystemExit("torch_mla: the mask flags, one dtype, forward only")
    b, hkv = args.batch, args.kv_heads or args.q_heads
    m = torch.from_numpy(mask(q_len, kv_len, args.window, args.stride, np)).repeat(group, 1)
    rows = q.reshape(b, hkv, group * q_len, dim)
    scale = dim ** -0.5

    def call():
        with torch.no_grad():
            s = torch.matmul(rows, k.transpose(-2, -1)).float() * scale
            p = s.masked_fill(~m, float("-inf")).softmax(dim=-1).to(v.dtype)
            return torch.matmul(p, v).reshape(b, args.q_heads, q_len, v.shape[-1])
    return call


def torch_sparse_call(peer, args, q, k, v, q_len, kv_len, dim, group):
    """--index-topk: each row's listed key and value rows gathered ([B, Hkv, Tq, K, D]),
    then torch_mla's explicit math on them (the row's heads as a matmul's rows) or SDPA
    (each (entry, kv head, row) a batch of its group's heads, enable_gqa)."""
    import torch
    if args.mod or args.block_mask or args.backward or args.kv_dtype not in ("", args.dtype):
        raise SystemExit("--index-topk: the mask flags, one dtype, forward only")
    if peer not in ("torch_mla", "torch_sdpa"):
        raise SystemExit("--index-topk: torch_mla or torch_sdpa")
    idx = torch.from_numpy(top_keys(args, q_len, kv_len))
    if (idx < 0).any():
        raise SystemExit("--index-topk: rows allowing fewer than K keys are left to octattn")
    b, hkv, K = args.batch, args.kv_heads or args.q_heads, args.index_topk
    rows = q.reshape(b, hkv, group, q_len, dim).transpose(2, 3)  # [B, Hkv, Tq, group, D]
    flat = idx.reshape(-1)
    scale = dim ** -0.5
    F = torch.nn.functional

    def call():
        with torch.no_grad():
            kk = k[:, :, flat].reshape(b, hkv, q_len, K, dim)
            vv = v[:, :, flat].reshape(b, hkv, q_len, K, v.shape[-1])
            if peer == "torch_sdpa":
                o = F.scaled_dot_product_attention(
                    rows.reshape(-1, group, 1, dim), kk.reshape(-1, 1, K, dim),
                    vv.reshape(-1, 1, K, v.shape[-1]), enable_gqa=True)
            else:
                s = torch.matmul(rows, kk.transpose(-2, -1)).float() * scale
                o = torch.matmul(s.softmax(dim=-1).to(v.dtype), vv)
            return o.reshape(b, hkv, q_len, group, -1).transpose(2, 3).reshape(
                b, args.q_heads, q_len, -1)
    return call


def numpy_call(args, q_len, kv_len, dim):
    import numpy as np
    q, k, v = inputs(args, q_len, kv_len, dim)
    group = args.q_heads // (args.kv_heads or args.q_heads)
    name, value = modifier(args)
    m = mask(q_len, kv_len, args.window, args.stride, np, int(value) if name == "chunk" else 0)
    if args.index_topk:  # the listed pairs only
        listed = np.zeros_like(m)
        for i, row in enumerate(top_keys(args, q_len, kv_len)):
            listed[i, row[row >= 0]] = True
        m = m & listed
    slopes, sinks, bias = mod_arrays(args, q_len, kv_len, np)
    dist = np.arange(kv_len)[None, :] - (np.arange(q_len)[:, None] + (kv_len - q_len))

    def call():
        out = np.empty((args.batch, args.q_heads, q_len, v.shape[-1]), np.float32)
        for b in range(args.batch):
            for h in range(args.q_heads):
                s = q[b, h] @ k[b, h // group].T * np.float32(dim ** -0.5)
                if name == "softcap":
                    s = np.float32(value) * np.tanh(s / np.float32(value))
                if name == "alibi":
                    s = s + slopes[h] * dist
                if name == "bias_tensor":
                    s = s + bias
                s[~m] = -np.inf
                mx = s.max(axis=1, keepdims=True)
                if name == "sinks":
                    mx = np.maximum(mx, sinks[h])
                s = np.exp(s - mx)
                total = s.sum(axis=1, keepdims=True)
                if name == "sinks":
                    total = total + np.exp(sinks[h] - mx)
                out[b, h] = (s / total) @ v[b, h // group]
        return out
    return call


def onnxruntime_call(args, q_len, kv_len, dim):
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper
    if q_len != kv_len or args.stride:
        raise SystemExit("onnxruntime_gqa: q_len == kv_len and no strided columns only")
    if args.mod:
        raise SystemExit("onnxruntime_gqa: no score modifier here")
    if args.dtype != "f32" or args.kv_dtype not in ("", "f32"):
        raise SystemExit("onnxruntime_gqa: f32 here")
    if value_dim(args, dim) != dim or args.v_of_k:
        raise SystemExit("onnxruntime_gqa: value_dim = head_dim only")
    hq, hkv, b = args.q_heads, args.kv_heads or args.q_heads, args.batch
    node = helper.make_node(
        "GroupQueryAttention",
        ["query", "key", "value", "", "", "seqlens_k", "total_sequence_length"],
        ["output", "present_key", "present_value"], domain="com.microsoft",
        num_heads=hq, kv_num_heads=hkv, scale=dim ** -0.5,
        local_window_size=args.window if args.window else -1)
    f32, i32 = TensorProto.FLOAT, TensorProto.INT32
    graph = helper.make_graph(
        [node], "gqa",
        [helper.make_tensor_value_info("query", f32, [b, q_len, hq * dim]),
         helper.make_tensor_value_info("key", f32, [b, kv_len, hkv * dim]),
         helper.make_tensor_value_info("value", f32, [b, kv_len, hkv * dim]),
         helper.make_tensor_value_info("seqlens_k", i32, [b]),
         helper.make_tensor_value_info("total_sequence_length", i32, [1])],
        [helper.make_tensor_value_info("output", f32, [b, q_len, hq * dim]),
         helper.make_tensor_value_info("present_key", f32, None),
         helper.make_tensor_value_info("present_value", f32, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    q, k, v = inputs(args, q_len, kv_len, dim)
    feeds = {
        # [B, T, H * D], the layout the op takes (a copy made once, outside the timing)
        "query": np.ascontiguousarray(q.transpose(0, 2, 1, 3).reshape(b, q_len, hq * dim)),
        "key": np.ascontiguousarray(k.transpose(0, 2, 1, 3).reshape(b, kv_len, hkv * dim)),
        "value": np.ascontiguousarray(v.transpose(0, 2, 1, 3).reshape(b, kv_len, hkv * dim)),
        "seqlens_k": np.full([b], kv_len - 1, np.int32),
        "total_sequence_length": np.array([kv_len], np.int32),
    }
    return lambda: sess.run(["output"], feeds)


def ggml_call(args, q_len, kv_len, dim):
    import numpy as np
    folder = args.ggml_lib or os.environ.get("OCTATTN_GGML_LIB", "")
    if not folder:
        raise SystemExit("ggml_flash: no --ggml-lib (a folder with libggml-base.so, libggml-cpu.so)")
    if value_dim(args, dim) != dim or args.v_of_k:
        raise SystemExit("ggml_flash: value_dim = head_dim only here")
    base = ctypes.CDLL(os.path.join(folder, "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(os.path.join(folder, "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)

    class InitParams(ctypes.Structure):
        _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p),
                    ("no_alloc", ctypes.c_bool)]
    p = ctypes.c_void_p
    base.ggml_init.restype, base.ggml_init.argtypes = p, [InitParams]
    base.ggml_new_tensor_4d.restype = p
    base.ggml_new_tensor_4d.argtypes = [p, ctypes.c_int] + [ctypes.c_int64] * 4
    base.ggml_flash_attn_ext.restype = p
    base.ggml_flash_attn_ext.argtypes = [p] * 5 + [ctypes.c_float] * 3
    base.ggml_flash_attn_ext_set_prec.argtypes = [p, ctypes.c_int]
    base.ggml_new_graph.restype, base.ggml_new_graph.argtypes = p, [p]
    base.ggml_build_forward_expand.argtypes = [p, p]
    base.ggml_get_data.restype, base.ggml_get_data.argtypes = p, [p]
    cpu.ggml_graph_compute_with_ctx.restype = ctypes.c_int
    cpu.ggml_graph_compute_with_ctx.argtypes = [p, p, ctypes.c_int]
    f32, f16, prec_f32 = 0, 1, 10  # GGML_TYPE_F32, GGML_TYPE_F16, GGML_PREC_F32

    q, k, v = inputs(args, q_len, kv_len, dim)
    name, value = modifier(args)
    if name == "sinks":
        raise SystemExit("ggml_flash: sinks are not wired here")
    # ggml takes f32 queries; its f16 K/V (llama.cpp's default cache) with --dtype or
    # --kv-dtype f16; its q8_0 and q4_0 block caches with --kv-dtype.
    cache = args.kv_dtype or args.dtype
    blocks = {"q8_0": (8, 34), "q4_0": (2, 18)}  # GGML_TYPE_Q8_0, GGML_TYPE_Q4_0; bytes
    if cache not in ("f32", "f16") and cache not in blocks:
        raise SystemExit("ggml_flash: " + cache + " K/V are not wired here")
    kv_type = f16 if cache == "f16" else f32
    if cache == "f16":
        k, v = k.astype(np.float16), v.astype(np.float16)
    if cache in blocks:
        import octattn
        kv_type, unit = blocks[cache]

        def quantized(x):  # [B, H, T, D / 32 * unit] bytes, as ggml lays a row
            out = np.empty(x.shape[:3] + (x.shape[3] // 32 * unit,), np.uint8)
            octattn.kv_store(x, out, kv_format=cache)
            return out
        k, v = quantized(k), quantized(v)
    allowed = mask(q_len, kv_len, args.window, args.stride, np, int(value) if name == "chunk" else 0)
    add = mod_arrays(args, q_len, kv_len, np)[2] if name == "bias_tensor" else 0.0
    m = np.where(allowed, add, -np.inf).astype(np.float16)
    max_bias = 8.0 if name == "alibi" else 0.0
    softcap = value if name == "softcap" else 0.0
    size = q.nbytes * 2 + k.nbytes + v.nbytes + m.nbytes + (256 << 20)
    ctx = base.ggml_init(InitParams(size, None, False))

    def tensor(kind, a):  # ggml's ne is the numpy shape reversed (a block row: D values)
        ne = list(reversed(a.shape)) + [1] * (4 - a.ndim)
        if a.dtype == np.uint8:
            ne[0] = dim
        t = base.ggml_new_tensor_4d(ctx, kind, *ne)
        ctypes.memmove(base.ggml_get_data(t), a.ctypes.data, a.nbytes)
        return t
    out = base.ggml_flash_attn_ext(ctx, tensor(f32, q), tensor(kv_type, k), tensor(kv_type, v),
                                   tensor(f16, m), dim ** -0.5, max_bias, softcap)
    base.ggml_flash_attn_ext_set_prec(out, prec_f32)
    graph = base.ggml_new_graph(ctx)
    base.ggml_build_forward_expand(graph, out)

    def call():
        if cpu.ggml_graph_compute_with_ctx(ctx, graph, args.threads) != 0:
            raise SystemExit("ggml_graph_compute_with_ctx failed")

    def result():  # [B, Hq, T, D] (ggml's result is [B, T, Hq, D])
        n = q.size
        flat = np.ctypeslib.as_array(ctypes.cast(base.ggml_get_data(out), ctypes.POINTER(ctypes.c_float)), (n,))
        return flat.reshape(args.batch, q_len, args.q_heads, dim).transpose(0, 2, 1, 3).copy()
    call.result = result  # for checks: the output of the last call
    return call


def run_case(peer, args, q_len, kv_len, dim):
    """One case in this (fresh) process: median, min, max seconds and the peak RSS
    growth of the first call, in MiB."""
    if args.backward and peer not in ("torch_sdpa", "torch_flex"):
        raise SystemExit(f"{peer} has no backward")
    if peer.startswith("torch"):
        call = torch_call(peer, args, q_len, kv_len, dim)
    elif peer == "numpy_by_hand":
        call = numpy_call(args, q_len, kv_len, dim)
    elif peer == "onnxruntime_gqa":
        call = onnxruntime_call(args, q_len, kv_len, dim)
    elif peer == "ggml_flash":
        call = ggml_call(args, q_len, kv_len, dim)
    else:
        raise SystemExit(f"unknown peer {peer}")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    call()
    extra = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times), extra


def check(args, shapes, peers):
    """Each Python peer's output against the NumPy one (max abs difference), so that every
    peer is known to compute the same attention."""
    import numpy as np
    for q_len, kv_len, dim in shapes:
        ref = numpy_call(args, q_len, kv_len, dim)()
        for peer in peers:
            if peer in ("octattn", "numpy_by_hand"):
                continue
            try:
                if peer.startswith("torch"):
                    out = torch_call(peer, args, q_len, kv_len, dim)().float().numpy()
                elif peer == "onnxruntime_gqa":
                    out = onnxruntime_call(args, q_len, kv_len, dim)()[0]
                    out = out.reshape(args.batch, q_len, args.q_heads, dim).transpose(0, 2, 1, 3)
                else:
                    call = ggml_call(args, q_len, kv_len, dim)
                    call()
                    out = call.result()
                diff = float(np.abs(out - ref).max())
            except (ImportError, SystemExit) as e:
                print(json.dumps({"check": peer, "q_len": q_len, "head_dim": dim, "error": str(e)}))
                continue
            print(json.dumps({"check": peer, "q_len": q_len, "kv_len": kv_len, "head_dim": dim,
                              "max_abs_diff_vs_numpy": diff}), flush=True)


def octattn_case(args, q_len, kv_len, dim, dense_mask=False):
    cmd = [args.octattn, "bench", "--json", "--algo", "fused", "--batch", str(args.batch),
           "--q-heads", str(args.q_heads), "--kv-heads", str(args.kv_heads or args.q_heads),
           "--q-len", str(q_len), "--kv-len", str(kv_len), "--head-dim", str(dim),
           "--threads", str(args.threads), "--repeat", str(args.repeat)]
    if args.backward:
        cmd.append("--backward")
    if args.target:
        cmd += ["--target", args.target]
    cmd += ["--dtype", args.dtype] + (["--kv-dtype", args.kv_dtype] if args.kv_dtype else [])
    cmd += ["--kv-group", str(args.kv_group)]
    if args.window:
        cmd += ["--window", str(args.window), "--stride", str(args.stride)]
    name, value = modifier(args)
    if name:
        cmd += ["--" + name.replace("_", "-")] + ([args.mod.partition("=")[2]]
                                                  if name in ("softcap", "chunk") else [])
    if args.block_mask:
        cmd += ["--block-mask", args.block_mask] + (["--mask-tensor"] if dense_mask else [])
    if args.value_dim:
        cmd += ["--value-dim", str(args.value_dim)]
    if args.v_of_k:
        cmd.append("--v-of-k")
    if args.index_topk:
        cmd += ["--index-topk", str(args.index_topk)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError((r.stderr.strip().splitlines() or ["octattn bench failed"])[-1])
    d = json.loads(r.stdout.strip().splitlines()[-1])
    return d["seconds_median"], d["seconds_min"], d["seconds_max"], d["extra_rss_mib"]


def child(peer, args, q_len, kv_len, dim):
    if peer in ("octattn", "octattn_dense_mask"):
        return octattn_case(args, q_len, kv_len, dim, peer == "octattn_dense_mask")
    env = dict(os.environ)
    # Old OpenBLAS settings of this environment slow current builds.
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = str(args.threads)
    cmd = [sys.executable, __file__, "--one", f"{peer}:{q_len}:{kv_len}:{dim}"] + sys.argv[1:]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError((r.stderr.strip().splitlines() or ["failed"])[-1])
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--q-heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=0)
    ap.add_argument("--q-len", default="1024")
    ap.add_argument("--kv-len", default="")
    ap.add_argument("--head-dim", default="64")
    ap.add_argument("--window", type=int, default=0)
    ap.add_argument("--stride", type=int, default=0)
    ap.add_argument("--mod", default="", help="one score modifier: softcap=X, alibi, sinks, "
                    "chunk=N, mask_tensor, bias_tensor")
    ap.add_argument("--block-mask", default="",
                    help="documents:N: N documents packed in the sequence, causal inside each "
                    "(octattn's block mask, its dense mask, torch_sdpa's mask, torch_flex)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", default="f32", choices=("f32", "bf16", "f16"),
                    help="q, k, v and o (octattn, torch; ggml: f16 K/V)")
    ap.add_argument("--kv-dtype", default="",
                    choices=("", "f32", "bf16", "f16", "int8", "fp8_e4m3", "fp8_e5m2", "q8_0",
                             "q4_0"),
                    help="K and V only (f32 queries): torch widens or dequantizes them each "
                    "call (no q8_0/q4_0); ggml reads f16, q8_0 and q4_0 caches")
    ap.add_argument("--kv-group", type=int, default=32,
                    help="an int8 cache's channels per scale (octattn and torch)")
    ap.add_argument("--target", default="",
                    help="the octattn target (octattn bench --target; default auto)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peers", default="octattn,torch_sdpa,onnxruntime_gqa,ggml_flash")
    ap.add_argument("--octattn", default=os.path.join(HERE, "..", "build", "release", "tools",
                                                       "octattn"))
    ap.add_argument("--ggml-lib", default="")
    ap.add_argument("--check", action="store_true",
                    help="compare each Python peer's output with NumPy's and stop")
    ap.add_argument("--backward", action="store_true",
                    help="time the backward (octattn and torch_sdpa)")
    ap.add_argument("--value-dim", type=int, default=0,
                    help="v's (and o's) head dimension (default: head_dim)")
    ap.add_argument("--v-of-k", action="store_true",
                    help="v a view of k's first value_dim columns (MLA's latent rows)")
    ap.add_argument("--index-topk", type=int, default=0,
                    help="token-sparse: each row reads K random keys of those the mask allows")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: one case in a child
    args = ap.parse_args()
    if args.one:
        peer, q_len, kv_len, dim = args.one.split(":")
        print(json.dumps(run_case(peer, args, int(q_len), int(kv_len), int(dim))))
        return
    shapes = [(q, kv, d) for q in map(int, args.q_len.split(","))
              for kv in (map(int, args.kv_len.split(",")) if args.kv_len else [q])
              for d in map(int, args.head_dim.split(","))]
    if args.block_mask and args.peers == ap.get_default("peers"):
        args.peers = "octattn,octattn_dense_mask,torch_flex,torch_sdpa"
    if args.v_of_k and any(args.value_dim > d for _, _, d in shapes):
        raise SystemExit("--v-of-k views k's first --value-dim columns: at most --head-dim")
    if (args.value_dim or args.v_of_k or args.index_topk) and args.peers == ap.get_default("peers"):
        args.peers = "octattn,torch_mla,torch_sdpa"
    peers = args.peers.split(",")
    if args.backward:
        peers = [p for p in peers if p in ("octattn", "octattn_dense_mask", "torch_sdpa")]
    if args.check:
        check(args, shapes, peers)
        return
    best = {}
    for rnd in range(args.rounds):
        for q_len, kv_len, dim in shapes:
            dv = value_dim(args, dim)
            per_pair = 2.0 * (3 * dim + 2 * dv) if args.backward else 2.0 * (dim + dv)
            flops = per_pair * allowed_pairs(args, q_len, kv_len) * args.batch * args.q_heads
            for peer in peers:
                case = {"peer": peer, "round": rnd, "threads": args.threads, "batch": args.batch,
                        "q_heads": args.q_heads, "kv_heads": args.kv_heads or args.q_heads,
                        "q_len": q_len, "kv_len": kv_len, "head_dim": dim,
                        "value_dim": value_dim(args, dim), "v_of_k": args.v_of_k,
                        "index_topk": args.index_topk,
                        "window": args.window, "stride": args.stride, "mod": args.mod,
                        "block_mask": args.block_mask,
                        "dtype": args.dtype, "kv_dtype": args.kv_dtype or args.dtype,
                        "pass": "backward" if args.backward else "forward"}
                try:
                    med, lo, hi, extra = child(peer, args, q_len, kv_len, dim)
                except RuntimeError as e:
                    print(json.dumps(dict(case, error=str(e))), flush=True)
                    continue
                gflops = flops / med / 1e9
                print(json.dumps(dict(case, seconds_median=med, seconds_min=lo, seconds_max=hi,
                                      gflops=gflops, extra_rss_mib=extra)), flush=True)
                key = (q_len, kv_len, dim)
                best.setdefault(key, {})
                best[key][peer] = max(best[key].get(peer, 0.0), gflops)
    for (q_len, kv_len, dim), got in best.items():
        ours = got.get("octattn")
        print(json.dumps({
            "summary": True, "pass": "backward" if args.backward else "forward",
            "threads": args.threads, "q_heads": args.q_heads,
            "kv_heads": args.kv_heads or args.q_heads, "q_len": q_len, "kv_len": kv_len,
            "head_dim": dim, "value_dim": value_dim(args, dim), "v_of_k": args.v_of_k,
            "index_topk": args.index_topk,
            "window": args.window, "stride": args.stride, "mod": args.mod,
            "block_mask": args.block_mask,
            "dtype": args.dtype, "kv_dtype": args.kv_dtype or args.dtype,
            "best_gflops": {p: round(g, 2) for p, g in got.items()},
            "octattn_ratio": {p: round(ours / g, 2) for p, g in got.items()
                              if ours and p != "octattn"}}), flush=True)


if __name__ == "__main__":
    main()
