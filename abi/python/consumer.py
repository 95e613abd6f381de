"""Calls liboctattn through ctypes, as a Python runtime would: the ABI as seen by FFI."""
import ctypes
import math
import sys


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("reserved", ctypes.c_int32),
                ("shape", ctypes.c_int64 * 4), ("stride", ctypes.c_int64 * 4)]


class Options(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("causal", ctypes.c_int32),
                ("algorithm", ctypes.c_int32), ("window", ctypes.c_int64),
                ("stride", ctypes.c_int64), ("q_start", ctypes.c_int64),
                ("scale", ctypes.c_float), ("reserved", ctypes.c_int32),
                ("k_start", ctypes.c_int64),
                # since 0.3
                ("chunk", ctypes.c_int64), ("softcap", ctypes.c_float),
                ("reserved2", ctypes.c_int32), ("alibi_slopes", ctypes.POINTER(ctypes.c_float)),
                ("sinks", ctypes.POINTER(ctypes.c_float)), ("bias", ctypes.c_void_p),
                ("mask", ctypes.c_void_p),
                # since 0.6
                ("q_starts", ctypes.POINTER(ctypes.c_int64)),
                ("kv_starts", ctypes.POINTER(ctypes.c_int64)),
                ("kv_lens", ctypes.POINTER(ctypes.c_int64)), ("sequences", ctypes.c_int64),
                ("cu_seqlens_q", ctypes.POINTER(ctypes.c_int64)),
                ("cu_seqlens_k", ctypes.POINTER(ctypes.c_int64)),
                ("block_table", ctypes.POINTER(ctypes.c_int32)), ("block_table_cols", ctypes.c_int64),
                # since 0.11
                ("k_scale", ctypes.c_void_p), ("v_scale", ctypes.c_void_p),
                ("k_scale_rows", ctypes.c_int64), ("v_scale_rows", ctypes.c_int64),
                ("qk_precision", ctypes.c_int32), ("reserved3", ctypes.c_int32),
                ("tree", ctypes.c_void_p), ("tree_row_bytes", ctypes.c_int64),
                ("tree_stride", ctypes.c_int64), ("block_counts", ctypes.c_void_p),
                ("block_indices", ctypes.c_void_p), ("full_block_counts", ctypes.c_void_p),
                ("full_block_indices", ctypes.c_void_p), ("block_q", ctypes.c_int64),
                ("block_kv", ctypes.c_int64), ("key_scores", ctypes.c_void_p),
                ("key_indices", ctypes.c_void_p), ("key_counts", ctypes.c_void_p),
                ("key_indices2", ctypes.c_void_p), ("key_counts2", ctypes.c_void_p)]


class RunInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("algorithm", ctypes.c_int32),
                ("backend", ctypes.c_int32), ("target", ctypes.c_int32), ("threads", ctypes.c_int32),
                ("shared_kv_rows", ctypes.c_int64)]


# The layouts, pinned as in abi/consumer.c: (struct, size, field offsets). Fields are
# only appended: 0.2 added k_start to the options (48 -> 56 bytes), 0.3 chunk and the
# score modifiers (56 -> 104), 0.6 the sequences of padded, ragged and paged batches
# (104 -> 168), 0.11 the scales of quantized caches, qk_precision, the tree, block masks and
# key scores and key lists (168 -> 320).
PINNED = [
    (Tensor, 80, {"data": 0, "dtype": 8, "reserved": 12, "shape": 16, "stride": 48}),
    (Options, 320, {"struct_size": 0, "causal": 8, "algorithm": 12, "window": 16, "stride": 24,
                    "q_start": 32, "scale": 40, "reserved": 44, "k_start": 48, "chunk": 56,
                    "softcap": 64, "reserved2": 68, "alibi_slopes": 72, "sinks": 80, "bias": 88,
                    "mask": 96, "q_starts": 104, "kv_starts": 112, "kv_lens": 120,
                    "sequences": 128, "cu_seqlens_q": 136, "cu_seqlens_k": 144,
                    "block_table": 152, "block_table_cols": 160, "k_scale": 168,
                    "v_scale": 176, "k_scale_rows": 184, "v_scale_rows": 192,
                    "qk_precision": 200, "reserved3": 204, "tree": 208,
                    "tree_row_bytes": 216, "tree_stride": 224, "block_counts": 232,
                    "block_indices": 240, "full_block_counts": 248, "full_block_indices": 256,
                    "block_q": 264, "block_kv": 272, "key_scores": 280,
                    "key_indices": 288, "key_counts": 296, "key_indices2": 304,
                    "key_counts2": 312}),
    (RunInfo, 32, {"struct_size": 0, "algorithm": 8, "backend": 12, "target": 16, "threads": 20,
                   "shared_kv_rows": 24}),
]


def check_layouts():
    for struct, size, offsets in PINNED:
        assert ctypes.sizeof(struct) == size, (struct.__name__, ctypes.sizeof(struct), size)
        for name, offset in offsets.items():
            got = getattr(struct, name).offset
            assert got == offset, (struct.__name__, name, got, offset)


def check_library_layouts(lib):
    """The pinned layouts are the library's own (octattn_struct_layout, since 0.4)."""
    lib.octattn_struct_layout.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t)]
    names = {Tensor: b"octattn_tensor", Options: b"octattn_attention_options",
             RunInfo: b"octattn_run_info"}
    got = ctypes.c_size_t()
    for struct, size, offsets in PINNED:
        assert lib.octattn_struct_layout(names[struct], None, ctypes.byref(got)) == 0
        assert got.value == size, (struct.__name__, got.value, size)
        for name, offset in offsets.items():
            assert lib.octattn_struct_layout(names[struct], name.encode(), ctypes.byref(got)) == 0, name
            assert got.value == offset, (struct.__name__, name, got.value, offset)


class Options01(ctypes.Structure):
    """The options as version 0.1's header declares them (48 bytes), frozen."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("causal", ctypes.c_int32),
                ("algorithm", ctypes.c_int32), ("window", ctypes.c_int64),
                ("stride", ctypes.c_int64), ("q_start", ctypes.c_int64),
                ("scale", ctypes.c_float), ("reserved", ctypes.c_int32)]


def check_old_struct(lib, ctx, tensors, want):
    """A caller with 0.1's 48-byte struct, resolving names at run time as ctypes does:
    octattn_attention_options_init_size writes its 48 bytes and not one past them, and
    the call with that struct gives the bytes of the defaults."""
    assert ctypes.sizeof(Options01) == 48
    canary = 0xA5
    # The struct, then 256 canary bytes: more than any version's struct adds.
    arena = (ctypes.c_uint8 * (48 + 256))(*([canary] * (48 + 256)))
    opts = Options01.from_buffer(arena)
    lib.octattn_attention_options_init_size.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    assert lib.octattn_attention_options_init_size(ctypes.addressof(opts), 48) == 0
    assert all(b == canary for b in arena[48:]), "init_size wrote past the caller's struct"
    assert opts.struct_size == 48 and opts.causal == 1 and opts.q_start == -2**63
    assert lib.octattn_attention_options_init_size(ctypes.addressof(opts), 47) == 7  # STRUCT_SIZE
    # What the plain name resolves to here: the newest init, writing the newest struct,
    # which the header tells run-time resolvers not to call. Shown on a buffer that holds it.
    big = (ctypes.c_uint8 * 1024)(*([canary] * 1024))
    lib.octattn_attention_options_init.argtypes = [ctypes.c_void_p]
    assert lib.octattn_attention_options_init(ctypes.addressof(big)) == 0
    written = ctypes.c_size_t.from_buffer(big).value
    assert written == ctypes.sizeof(Options), written
    assert all(b == canary for b in big[written:])
    o = tensors["o"]
    out = (ctypes.c_float * (o.shape[2] * o.shape[3]))()
    o_new = Tensor.from_buffer_copy(o)
    o_new.data = ctypes.cast(out, ctypes.c_void_p)
    st = lib.octattn_attention(ctx, ctypes.addressof(opts),
                               *(ctypes.byref(tensors[n]) for n in "qkv"), ctypes.byref(o_new),
                               None, None, None, 0)
    assert st == 0, lib.octattn_context_last_error(ctx)
    assert bytes(out) == bytes(want), "a 0.1 struct's call differs from the defaults'"
    assert all(b == canary for b in arena[48:])


def main(path):
    check_layouts()
    lib = ctypes.CDLL(path)
    check_library_layouts(lib)
    lib.octattn_status_string.restype = ctypes.c_char_p
    lib.octattn_version_string.restype = ctypes.c_char_p
    lib.octattn_context_last_error.restype = ctypes.c_char_p
    lib.octattn_context_last_error.argtypes = [ctypes.c_void_p]
    lib.octattn_attention.argtypes = [ctypes.c_void_p] + [ctypes.c_void_p] * 7 + [
        ctypes.c_void_p, ctypes.c_size_t]
    opts = Options()
    # The sized init: a run-time resolver gets the newest plain init (see the header).
    lib.octattn_attention_options_init_size.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    assert lib.octattn_attention_options_init_size(ctypes.byref(opts), ctypes.sizeof(opts)) == 0
    assert opts.struct_size == ctypes.sizeof(Options), "option struct layout differs"
    ctx = ctypes.c_void_p()
    assert lib.octattn_context_create(ctypes.byref(ctx)) == 0
    t, d = 5, 3
    bufs = {}
    tensors = {}
    for name in "qkvo":
        buf = (ctypes.c_float * (t * d))()
        for i in range(t * d):
            buf[i] = math.sin(i + ord(name)) if name != "o" else 0.0
        bufs[name] = buf
        ten = Tensor()
        shape = (ctypes.c_int64 * 4)(1, 1, t, d)
        assert lib.octattn_tensor_init(ctypes.byref(ten), buf, shape, 0) == 0
        tensors[name] = ten
    st = lib.octattn_attention(ctx, ctypes.byref(opts), *(ctypes.byref(tensors[n]) for n in "qkvo"),
                               None, None, None, 0)
    assert st == 0, lib.octattn_context_last_error(ctx)
    q, k, v, o = (bufs[n] for n in "qkvo")
    for i in range(t):  # a causal row, computed here in double precision
        s = [sum(q[i * d + c] * k[j * d + c] for c in range(d)) / math.sqrt(d) for j in range(i + 1)]
        m = max(s)
        e = [math.exp(x - m) for x in s]
        for c in range(d):
            want = sum(e[j] * v[j * d + c] for j in range(i + 1)) / sum(e)
            assert abs(o[i * d + c] - want) < 1e-5, (i, c, o[i * d + c], want)
    check_old_struct(lib, ctx, tensors, o)
    # A bad option comes back as a status with a message, not a crash.
    opts.window = -1
    st = lib.octattn_attention(ctx, ctypes.byref(opts), *(ctypes.byref(tensors[n]) for n in "qkvo"),
                               None, None, None, 0)
    assert lib.octattn_status_string(st) == b"invalid option", st
    assert b"window" in lib.octattn_context_last_error(ctx)
    lib.octattn_context_destroy(ctx)
    print("python ctypes consumer: ok, version", lib.octattn_version_string().decode())


if __name__ == "__main__":
    main(sys.argv[1])
