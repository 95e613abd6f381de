"""octattn under Hugging Face transformers models: attn_implementation="octattn".

    import octattn.hf
    octattn.hf.register()
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="octattn")

register() installs an attention function and its mask function together: the mask
function does not build a [B, 1, Tq, Tk] tensor for the usual causal and sliding-window
layers, it describes the call (query offset, the padding of each sequence), and the
attention function maps that to the library's options: causal, window (the layer's
sliding_window), q_start from the cache position, the padding as each sequence's valid
key rows (kv_starts, kv_lens and q_starts: a padded batch, one call, as fast as unpadded
rows) where every sequence's tokens are one run (left or right padding), else as a
boolean mask tensor [B, Tk] broadcast over heads and rows (stride 0, nothing
materialized), softcap and sinks where the model has them. A mask the library's options cannot express (custom
mask functions, packed sequences, block overlays) is built as transformers builds it for
sdpa and passed as the library's mask tensor, so every model stays exact.

Models run in float32, bfloat16 or float16, training included (the backward reads 16-bit
tensors as they are); dropout must be 0.

QuantizedCache keeps every layer's K/V quantized (int8 with a scale per group of channels,
float8, or ggml's q8_0/q4_0 blocks): each step's new rows go in through octattn.kv_store
and the attention reads the cache in place, so a step moves the quantized bytes only:

    cache = octattn.hf.QuantizedCache("int8", group=32)
    model.generate(ids, cache=cache, max_new_tokens=64)
"""
import functools

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

import octattn
from octattn import ops

NAME = "octattn"


class Mask:
    """What the mask function tells the attention function about one forward pass.

    q_start: the position of query row 0 minus that of key row 0; padding: None or a
    bool tensor [B, Tk] (True: a real token); spans: None or, where each row of padding
    is one run of real tokens, (kv_starts, kv_lens) int64 tensors [B] of those runs;
    dense: None or a bool tensor [B, 1 or H, Tq, Tk] to use as is (with causal off);
    window: the sliding window the mask function applies (0: none)."""

    __slots__ = ("q_start", "padding", "spans", "dense", "window")
    # Generation with a compilable (static) cache prepares the mask once per step and
    # hands it back to the model, which checks the dimensions of a mask it is given: it
    # passes a prepared 4-D mask through to the mask function unchanged.
    ndim = 4

    def __init__(self, q_start, padding=None, dense=None, window=0):
        self.q_start = q_start
        self.padding = padding
        self.spans = _spans(padding) if padding is not None else None
        self.dense = dense
        self.window = window


def _spans(padding):
    """(kv_starts, kv_lens) of a [B, Tk] bool padding whose rows each hold one run of
    True (or none), else None."""
    tk = padding.shape[1]
    count = padding.sum(dim=1)
    first = padding.to(torch.int8).argmax(dim=1)
    last = tk - 1 - padding.flip(1).to(torch.int8).argmax(dim=1)
    run = (count == 0) | (last - first + 1 == count)
    if not bool(run.all()):
        return None
    starts = torch.where(count > 0, first, torch.zeros_like(first))
    return starts.to(torch.int64).contiguous(), count.to(torch.int64).contiguous()


def _pattern(mask_function, config):
    """0 when mask_function is plain causal, w for a causal sliding window of w tokens,
    None for anything else: checked on pairs around the diagonal and the window edge."""
    from transformers.masking_utils import causal_mask_function
    if mask_function is causal_mask_function:
        return 0
    window = getattr(config, "sliding_window", None) or 0
    if window <= 0:
        return None
    q = torch.tensor([window + 8] * 6 + [3, 0])
    d = torch.tensor([-1, 0, window - 1, window, window + 1, window + 8, 4, 1])
    kv = q - d
    zero = torch.zeros_like(q)
    try:
        got = mask_function(zero, zero, q, kv)
    except Exception:  # a function that wants other arguments: not ours to read
        return None
    want = (d >= 0) & (d < window)
    return window if bool(torch.equal(torch.as_tensor(got, dtype=torch.bool), want)) else None


def mask_function(batch_size, q_length, kv_length, q_offset=0, kv_offset=0,
                  mask_function=None, attention_mask=None, config=None, **kwargs):
    """The AttentionMaskInterface entry: returns a Mask (see there)."""
    from transformers import masking_utils as mu
    if isinstance(attention_mask, Mask):  # prepared for this step already
        return attention_mask
    if mask_function is None:
        mask_function = mu.causal_mask_function
    q_start = int(q_offset) - int(kv_offset)
    pattern = _pattern(mask_function, config)
    if pattern is None:
        kw = dict(kwargs)
        kw.pop("allow_is_causal_skip", None)
        dense = mu.sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length,
                             q_offset=q_offset, kv_offset=kv_offset, mask_function=mask_function,
                             attention_mask=attention_mask, allow_is_causal_skip=False, **kw)
        return Mask(q_start, dense=dense)
    padding = None
    if attention_mask is not None:
        # Absolute key positions: the cache holds keys kv_offset .. kv_offset + kv_length.
        padding = mu.prepare_padding_mask(attention_mask, kv_length, kv_offset)
        if padding is not None:
            start = int(kv_offset)
            padding = padding[:, start:start + kv_length].to(torch.bool)
            if bool(padding.all()):
                padding = None
    return Mask(q_start, padding=padding, window=pattern)


def attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                      sliding_window=None, softcap=None, s_aux=None, **kwargs):
    """The AttentionInterface entry: query [B, Hq, Tq, D], key/value [B, Hkv, Tk, D]
    (any strides); returns ([B, Tq, Hq, Dv], None): the operator's o, or (the direct
    call) an output the library writes in place."""
    if dropout and module.training:
        raise NotImplementedError("octattn: attention dropout is not supported")
    B, H, T, _ = query.shape
    Tk = key.shape[2]
    cached = getattr(key, "_octattn_cache", None)  # a QuantizedCache layer's rows
    dv = cached.value_dim if cached is not None else value.shape[3]
    causal = bool(getattr(module, "is_causal", True))
    window, q_start, mask, spans = 0, None, None, None
    # The operator (autograd, torch.compile) unless the call reads a quantized cache,
    # which only the direct call takes (inference: no gradient reaches through it), or
    # neither gradients nor tracing need the operator and it is the Python-registered
    # one (tens of microseconds a call).
    compiling = torch.compiler.is_compiling()
    if cached is not None:
        if compiling:
            raise NotImplementedError("octattn: QuantizedCache runs in eager mode only")
        use_op = False
    else:
        grad = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or
                                            value.requires_grad or
                                            (s_aux is not None and s_aux.requires_grad))
        use_op = compiling or grad or ops.native
    if isinstance(attention_mask, Mask):
        q_start = attention_mask.q_start
        if attention_mask.dense is not None:
            causal = False
            mask = attention_mask.dense
        else:
            window = attention_mask.window or 0
            if attention_mask.spans is not None and not compiling:
                spans = attention_mask.spans  # positions count from each first real token
            elif attention_mask.padding is not None:  # [B, Tk] seen as [B, H, Tq, Tk]
                p = attention_mask.padding
                mask = p.as_strided((B, H, T, Tk), (p.stride(0), 0, 0, p.stride(1)))
    elif isinstance(attention_mask, torch.Tensor):  # a mask built elsewhere
        m = attention_mask[:, :, :, :Tk]
        mask = m if m.dtype == torch.bool else (m == 0)
        causal = False
        q_start = Tk - T
    elif sliding_window:
        window = int(sliding_window)
    if mask is not None and mask.shape[1] != H:
        mask = mask.expand(mask.shape[0], H, T, Tk)
    if mask is not None and mask.shape[0] != B:
        mask = mask.expand(B, H, T, Tk)
    sinks = s_aux.float() if s_aux is not None else None
    quant = cached.attention_kwargs(key) if cached is not None else {}
    batch = {}
    if spans is not None:
        starts, lens = spans
        batch = dict(kv_starts=starts, kv_lens=lens,
                     q_starts=((q_start if q_start is not None else Tk - T) - starts).contiguous())
    if use_op:  # [B, T, H, D] views in, o [B, Tq, Hq, Dv] contiguous out
        o, _ = ops.attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                             None, sinks, None, mask, causal=causal, window=window,
                             scale=scaling, q_start=q_start, softcap=float(softcap or 0.0),
                             layout="bthd", **batch)
        return o, None
    out = query.new_empty((B, T, H, dv))  # the model's dtype
    octattn.attention(query, key, value, causal=causal, window=window, scale=scaling, q_start=q_start,
                      softcap=float(softcap or 0.0), sinks=sinks, mask=mask,
                      out=out.transpose(1, 2), **batch, **quant)
    return out, None


# The formats QuantizedCache stores: (element dtype of the cache tensor, bytes of a ggml
# block of 32 values or None).
_FORMATS = {
    "int8": (torch.int8, None),
    "fp8_e4m3": (getattr(torch, "float8_e4m3fn", None), None),
    "fp8_e5m2": (getattr(torch, "float8_e5m2", None), None),
    "q8_0": (torch.uint8, 34),
    "q4_0": (torch.uint8, 18),
}


class QuantizedLayer(CacheLayerMixin):
    """One layer's quantized K/V: [B, Hkv, capacity, D] (ggml formats: D / 32 blocks
    of bytes), int8's scales [B, Hkv, capacity, D / group] float32, or with key_rows n
    (KIVI) the keys' [B, Hkv, capacity / n, D]: one scale per channel and block of n
    tokens. The capacity doubles as tokens arrive (the bytes copied once per doubling).
    KIVI's last block, while incomplete, keeps its tokens' source rows: each update
    stores the block again whole (its missing rows zeros), its scales the absmax of the
    tokens it has, so that the cache is read in place at every step."""

    is_sliding = False
    is_croppable = True

    def __init__(self, kv_format="int8", group=32, qk="exact", key_rows=0):
        super().__init__()
        if kv_format not in _FORMATS or _FORMATS[kv_format][0] is None:
            raise ValueError(f"octattn: kv_format is one of {sorted(_FORMATS)} "
                             "(float8 ones need a torch with float8 dtypes)")
        if qk not in ("exact", "int8") or (qk == "int8" and kv_format not in ("int8", "q8_0",
                                                                              "q4_0")):
            raise ValueError("octattn: qk is 'exact', or 'int8' with an int8, q8_0 or q4_0 "
                             "cache")
        if int(key_rows) < 0 or (key_rows and kv_format != "int8"):
            raise ValueError("octattn: key_rows (KIVI: keys scaled by channel in blocks of "
                             "key_rows tokens) takes an int8 cache")
        self.kv_format, self.group, self.length, self.qk = kv_format, int(group), 0, qk
        self.key_rows = int(key_rows)
        self.k_scale = self.v_scale = None
        self.k_tail = None  # KIVI: the source rows of the keys' incomplete last block

    def _rows(self, scale_name, n):
        """Rows of a scale tensor that n tokens use."""
        kr = self.key_rows if scale_name == "k_scale" else 0
        return -(-n // kr) if kr else n

    def _alloc(self, like, capacity, scale_name):
        B, H, _, D = like.shape
        dtype, block = _FORMATS[self.kv_format]
        cols = D if block is None else (D // 32) * block
        data = torch.empty((B, H, capacity, cols), dtype=dtype, device=like.device)
        scale = None
        if self.kv_format == "int8":
            by_channel = scale_name == "k_scale" and self.key_rows
            if D % self.group and not by_channel:
                raise ValueError(f"octattn: group {self.group} does not divide the head "
                                 f"dimension {D}")
            scale = torch.empty((B, H, self._rows(scale_name, capacity),
                                 D if by_channel else D // self.group),
                                dtype=torch.float32, device=like.device)
        return data, scale

    def lazy_initialization(self, key_states, value_states):
        self.device = key_states.device
        self.keys, self.k_scale = self._alloc(key_states, 0, "k_scale")
        self.values, self.v_scale = self._alloc(value_states, 0, "v_scale")
        self.is_initialized = True

    def _grow(self, need, key_states, value_states):
        capacity = self.keys.shape[2]
        if need <= capacity:
            return
        capacity = max(need, 2 * capacity, 256)
        if self.key_rows:  # whole blocks of KIVI's scales
            capacity = -(-capacity // self.key_rows) * self.key_rows
        n = self.length
        for name, scale_name, like in (("keys", "k_scale", key_states),
                                       ("values", "v_scale", value_states)):
            data, scale = self._alloc(like, capacity, scale_name)
            data[:, :, :n] = getattr(self, name)[:, :, :n]
            if scale is not None:
                rows = self._rows(scale_name, n)
                scale[:, :, :rows] = getattr(self, scale_name)[:, :, :rows]
            setattr(self, name, data)
            setattr(self, scale_name, scale)

    def _store(self, src, data, scale, n):
        t = src.shape[2]
        fmt = self.kv_format if data.dtype == torch.uint8 else None
        octattn.kv_store(src, data[:, :, n:n + t],
                         scale[:, :, n:n + t] if scale is not None else None, kv_format=fmt)

    def _store_keys_by_block(self, key_states, n):
        """KIVI: the keys from the start of block n // key_rows on (the incomplete
        block's kept rows, then the new ones), zero rows up to whole blocks."""
        kr = self.key_rows
        b0 = n // kr * kr
        rows = key_states if self.k_tail is None else torch.cat(
            [self.k_tail.to(key_states.dtype), key_states], dim=2)
        count = rows.shape[2]
        whole = -(-count // kr) * kr
        if whole > count:
            pad = rows.new_zeros((*rows.shape[:2], whole - count, rows.shape[3]))
            rows = torch.cat([rows, pad], dim=2)
        octattn.kv_store(rows, self.keys[:, :, b0:b0 + whole],
                         self.k_scale[:, :, b0 // kr:(b0 + whole) // kr], scale_rows=kr)
        keep = count % kr
        self.k_tail = rows[:, :, count - keep:count].clone() if keep else None

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, t = self.length, key_states.shape[2]
        if self.key_rows:
            self._grow(-(-(n + t) // self.key_rows) * self.key_rows, key_states, value_states)
            self._store_keys_by_block(key_states, n)
        else:
            self._grow(n + t, key_states, value_states)
            self._store(key_states, self.keys, self.k_scale, n)
        self._store(value_states, self.values, self.v_scale, n)
        self.length = n + t
        k, v = self.keys[:, :, :n + t], self.values[:, :, :n + t]
        # The attention function finds its way back here (attention_kwargs).
        k._octattn_cache = v._octattn_cache = self
        return k, v

    @property
    def value_dim(self):
        """The values' head dimension (a ggml row holds D / 32 blocks of bytes)."""
        block = _FORMATS[self.kv_format][1]
        return self.values.shape[3] if block is None else self.values.shape[3] // block * 32

    def attention_kwargs(self, key):
        """The quantized call's arguments for the rows update() returned."""
        n = key.shape[2]
        kw = {}
        if self.k_scale is not None:
            kw.update(k_scale=self.k_scale[:, :, :self._rows("k_scale", n)],
                      v_scale=self.v_scale[:, :, :n])
        if self.key_rows:
            kw["k_scale_rows"] = self.key_rows
        if self.keys.dtype == torch.uint8:
            kw["kv_format"] = self.kv_format
        if self.qk != "exact":
            kw["qk"] = self.qk
        return kw

    def get_mask_sizes(self, query_length):
        return self.length + query_length, 0

    def get_seq_length(self):
        return self.length

    def get_max_length(self):
        return -1

    def reset(self):
        self.length = 0
        self.k_tail = None

    def crop(self, tokens_to_remove):
        if tokens_to_remove > 0:
            raise ValueError("octattn: crop takes a negative count of tokens to remove")
        old, n = self.length, max(0, self.length + tokens_to_remove)
        self.length = n
        if self.key_rows:
            # KIVI: the rows kept of the (new) incomplete block: their source rows where
            # the block is the one kept, else their stored values (the source is gone).
            kr = self.key_rows
            b0 = n // kr * kr
            if n == b0:
                self.k_tail = None
            elif old // kr * kr == b0 and self.k_tail is not None:
                self.k_tail = self.k_tail[:, :, :n - b0].clone()
            else:
                block = self.k_scale[:, :, b0 // kr:b0 // kr + 1]
                self.k_tail = self.keys[:, :, b0:n].float() * block

    def _each(self, fn):
        for name in ("keys", "values", "k_scale", "v_scale", "k_tail"):
            x = getattr(self, name)
            if x is not None:
                rows = x.shape[2] if name == "k_tail" else self._rows(name, self.length)
                setattr(self, name, fn(x[:, :, :rows]).contiguous())

    def reorder_cache(self, beam_idx):
        if self.length:
            self._each(lambda x: x.index_select(0, beam_idx.to(x.device)))

    def batch_repeat_interleave(self, repeats):
        if self.length:
            self._each(lambda x: x.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices):
        if self.length:
            self._each(lambda x: x[indices, ...])


class QuantizedCache(Cache):
    """A transformers Cache whose layers keep K/V quantized (kv_format "int8" with one
    float32 scale per `group` channels of each token, "fp8_e4m3" and "fp8_e5m2" unscaled,
    or ggml's "q8_0" and "q4_0"), filled by octattn.kv_store and read in place by the
    attention of attn_implementation="octattn" (eager mode; every layer keeps all its
    tokens, sliding-window layers included, their window applied by the mask). qk="int8"
    (int8, q8_0 and q4_0): q . k as int8 dot products (OCTATTN_QK_INT8). key_rows n > 0
    (int8): KIVI's keys, one scale per channel and block of n tokens (values stay by
    token and group), which keeps outlier key channels accurate."""

    def __init__(self, kv_format="int8", group=32, qk="exact", key_rows=0):
        QuantizedLayer(kv_format, group, qk, key_rows)  # checks it now, not at the first step
        super().__init__(layer_class_to_replicate=functools.partial(
            QuantizedLayer, kv_format, group, qk, key_rows))


def register(name=NAME):
    """Makes attn_implementation=name use the library (attention and mask functions)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, mask_function)
