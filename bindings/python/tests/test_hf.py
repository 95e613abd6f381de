"""attn_implementation="octattn" in tiny random transformers models: the same greedy
tokens as sdpa, logits within the accuracy bound, padding and sliding windows mapped to
options (no materialized mask)."""
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import octattn.hf  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def registered():
    octattn.hf.register()


def tiny(config_cls, model_cls, **extra):
    config = config_cls(vocab_size=128, hidden_size=64, intermediate_size=128,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=256, **extra)
    torch.manual_seed(0)
    return model_cls(config).eval()


def compare(model, cache_implementation=None):
    """Greedy generation from a left-padded batch of two prompts, with sdpa and with
    octattn: (tokens equal, max |logit difference| over prompt and generated steps, masks
    the octattn mask function returned)."""
    torch.manual_seed(1)
    ids = torch.randint(1, 128, (2, 21))
    attention_mask = torch.ones_like(ids)
    attention_mask[0, :6] = 0  # the first prompt is 6 tokens shorter
    seen = []
    original = octattn.hf.mask_function

    def spy(*args, **kwargs):
        m = original(*args, **kwargs)
        seen.append(m)
        return m

    transformers.masking_utils.AttentionMaskInterface.register("octattn", spy)
    results = {}
    try:
        for impl in ("sdpa", "octattn"):
            model.set_attn_implementation(impl)
            with torch.no_grad():
                logits = model(input_ids=ids, attention_mask=attention_mask).logits
                gen = model.generate(input_ids=ids, attention_mask=attention_mask,
                                     max_new_tokens=24, do_sample=False, pad_token_id=0,
                                     output_logits=True, return_dict_in_generate=True,
                                     cache_implementation=cache_implementation)
            results[impl] = (logits, gen)
    finally:
        octattn.hf.register()
    valid = attention_mask.bool()
    diff = (results["sdpa"][0] - results["octattn"][0])[valid].abs().max().item()
    for a, b in zip(results["sdpa"][1].logits, results["octattn"][1].logits):
        diff = max(diff, (a - b).abs().max().item())
    same = torch.equal(results["sdpa"][1].sequences, results["octattn"][1].sequences)
    return same, diff, seen


def test_llama_with_grouped_queries():
    model = tiny(transformers.LlamaConfig, transformers.LlamaForCausalLM)
    same, diff, seen = compare(model)
    assert same and diff < 1e-4, diff
    assert seen and all(m.dense is None for m in seen)  # options, not a mask tensor
    assert any(m.padding is not None for m in seen)
    # Left padding: each sequence's tokens are one run, so a padded batch (no mask tensor).
    assert all(m.spans is not None for m in seen if m.padding is not None)


def test_llama_with_a_static_cache():
    model = tiny(transformers.LlamaConfig, transformers.LlamaForCausalLM)
    same, diff, seen = compare(model, cache_implementation="static")
    assert same and diff < 1e-4, diff


def test_mistral_with_a_sliding_window():
    model = tiny(transformers.MistralConfig, transformers.MistralForCausalLM, sliding_window=8)
    same, diff, seen = compare(model)
    assert same and diff < 1e-4, diff
    assert seen and all(m.dense is None for m in seen)
    assert any(m.window == 8 for m in seen)


def test_unknown_mask_functions_fall_back_to_a_mask_tensor():
    from transformers.masking_utils import and_masks, causal_mask_function

    def even_keys(batch_idx, head_idx, q_idx, kv_idx):
        return kv_idx % 2 == 0

    m = octattn.hf.mask_function(1, 4, 4, mask_function=and_masks(causal_mask_function,
                                                                   even_keys))
    assert m.dense is not None and m.dense.dtype == torch.bool
    q = torch.randn(1, 2, 4, 8)

    class Module(torch.nn.Module):
        is_causal = True

    out, _ = octattn.hf.attention_forward(Module(), q, q, q, m)
    ref = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=m.dense)
    # row 0 reads key 0; rows 1-3 read the even keys up to themselves
    torch.testing.assert_close(out.transpose(1, 2), ref, atol=1e-5, rtol=0)


def test_llama_in_bfloat16():
    """A bf16 model: the library computes in float32 on the bf16 values and rounds o to
    bf16. Its prompt logits stay as close to the float32 model's (the same bf16 weights
    widened) as sdpa's bf16 kernel does, which rounds its weights to bf16 too: within bf16
    precision, not float32's."""
    model = tiny(transformers.LlamaConfig, transformers.LlamaForCausalLM).to(torch.bfloat16)
    wide = tiny(transformers.LlamaConfig, transformers.LlamaForCausalLM).to(torch.bfloat16).float()
    torch.manual_seed(1)
    ids = torch.randint(1, 128, (2, 21))
    attention_mask = torch.ones_like(ids)
    attention_mask[0, :6] = 0
    logits = {}
    with torch.no_grad():
        for impl in ("sdpa", "octattn"):
            model.set_attn_implementation(impl)
            logits[impl] = model(input_ids=ids, attention_mask=attention_mask).logits.float()
        wide.set_attn_implementation("sdpa")
        ref = wide(input_ids=ids, attention_mask=attention_mask).logits
    valid = attention_mask.bool()
    scale = ref[valid].abs().max().item()
    ours = (logits["octattn"] - ref)[valid].abs().max().item()
    theirs = (logits["sdpa"] - ref)[valid].abs().max().item()
    assert ours < 0.02 * scale and theirs < 0.02 * scale, (ours, theirs, scale)
    assert (logits["octattn"] - logits["sdpa"])[valid].abs().max().item() < 0.02 * scale


def test_llama_trains_through_the_operator():
    """A training step in eager mode (padded batch, grouped queries): the attention runs
    as torch.ops.octattn.attention, whose autograd formula carries the gradients, so the
    loss and every parameter's gradient equal sdpa's within float32 rounding."""
    torch.manual_seed(2)
    ids = torch.randint(1, 128, (2, 17))
    attention_mask = torch.ones_like(ids)
    attention_mask[1, :5] = 0
    grads, losses = {}, {}
    for impl in ("sdpa", "octattn"):
        model = tiny(transformers.LlamaConfig, transformers.LlamaForCausalLM).train()
        model.set_attn_implementation(impl)
        out = model(input_ids=ids, attention_mask=attention_mask, labels=ids)
        out.loss.backward()
        losses[impl] = out.loss.item()
        grads[impl] = {n: p.grad for n, p in model.named_parameters()}
    assert abs(losses["sdpa"] - losses["octattn"]) < 1e-5, losses
    for name, want in grads["sdpa"].items():
        got = grads["octattn"][name]
        assert got is not None, name
        err = (got - want).abs().max().item()
        assert err <= 1e-4 * max(1.0, want.abs().max().item()), (name, err)


def _dequantize(layer, data, scale, keys=False):
    """The header's values of a QuantizedLayer's rows, in float32."""
    fmt = layer.kv_format
    if fmt == "int8" and keys and layer.key_rows:  # KIVI: by channel, key_rows a row
        rows = scale.repeat_interleave(layer.key_rows, dim=2)
        return data.float() * rows[:, :, :data.shape[2]]
    if fmt == "int8":
        return data.float() * scale.repeat_interleave(layer.group, dim=3)
    if fmt.startswith("fp8"):
        return data.float()
    blocks = data.reshape(*data.shape[:3], -1, 34 if fmt == "q8_0" else 18)
    d = blocks[..., :2].contiguous().view(torch.float16).float()  # [..., blocks, 1]
    if fmt == "q8_0":
        q = blocks[..., 2:].contiguous().view(torch.int8).float()
    else:  # value j: low nibble of byte j; value j + 16: its high nibble
        b = blocks[..., 2:].to(torch.int16)
        q = (torch.cat([b & 15, b >> 4], dim=-1) - 8).float()
    return (d * q).reshape(*data.shape[:3], -1)


class _DequantizedLayer(octattn.hf.QuantizedLayer):
    """The same stored bytes, handed to the attention as float32 values."""

    def update(self, key_states, value_states, *args, **kwargs):
        k, v = super().update(key_states, value_states)
        del k._octattn_cache, v._octattn_cache
        n = self.length
        k_rows = -(-n // self.key_rows) if self.key_rows else n
        scales = (self.k_scale[:, :, :k_rows] if self.k_scale is not None else None,
                  self.v_scale[:, :, :n] if self.v_scale is not None else None)
        return tuple(_dequantize(self, x, s, keys=i == 0)
                     for i, (x, s) in enumerate(zip((k, v), scales)))


@pytest.mark.parametrize("kv_format,key_rows", [("int8", 0), ("int8", 8), ("fp8_e4m3", 0),
                                                ("fp8_e5m2", 0), ("q8_0", 0), ("q4_0", 0)])
def test_quantized_cache_is_read_in_place_exactly(kv_format, key_rows):
    """Greedy generation over octattn.hf.QuantizedCache: every step's logits are those of
    the same model reading the dequantized values of the same cache as float32 tensors,
    byte for byte (the library's quantized call is its f32 call on those values)."""
    import functools
    model = tiny(transformers.LlamaConfig, transformers.LlamaForCausalLM, head_dim=32)
    model.set_attn_implementation("octattn")
    torch.manual_seed(1)
    ids = torch.randint(1, 128, (2, 21))
    attention_mask = torch.ones_like(ids)
    attention_mask[0, :6] = 0
    runs = []
    for layer in (octattn.hf.QuantizedLayer, _DequantizedLayer):
        cache = transformers.cache_utils.Cache(layer_class_to_replicate=functools.partial(
            layer, kv_format, 16, key_rows=key_rows))
        with torch.no_grad():
            runs.append(model.generate(input_ids=ids, attention_mask=attention_mask,
                                       cache=cache, max_new_tokens=12,
                                       do_sample=False, pad_token_id=0, output_logits=True,
                                       return_dict_in_generate=True))
        assert cache.get_seq_length() == 21 + 12 - 1
        assert isinstance(cache.layers[0], layer)
    assert torch.equal(runs[0].sequences, runs[1].sequences)
    for a, b in zip(runs[0].logits, runs[1].logits):
        assert torch.equal(a, b)


def test_quantized_cache_forward_with_grad_mode_on():
    """A forward pass over a QuantizedCache outside torch.no_grad (the weights require
    gradients, so q does): the direct call serves it, with the logits of no_grad."""
    model = tiny(transformers.LlamaConfig, transformers.LlamaForCausalLM, head_dim=32)
    model.set_attn_implementation("octattn")
    ids = torch.randint(1, 128, (1, 9), generator=torch.Generator().manual_seed(4))
    logits = []
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            cache = octattn.hf.QuantizedCache("int8", group=16)
            logits.append(model(input_ids=ids, cache=cache, use_cache=True).logits)
    assert torch.equal(logits[0].detach(), logits[1])


def test_quantized_cache_stores_quantized_bytes_and_checks_its_format():
    cache = octattn.hf.QuantizedCache("int8", group=16)
    k = torch.randn(1, 2, 5, 32)
    keys, values = cache.update(k, k * 2, 0)
    layer = cache.layers[0]
    assert keys.dtype == torch.int8 and keys.shape == (1, 2, 5, 32)
    assert layer.k_scale.shape[3] == 2 and cache.get_seq_length() == 5
    assert (_dequantize(layer, keys, layer.k_scale[:, :, :5]) - k).abs().max() <= \
        layer.k_scale[:, :, :5].max() / 2 * 1.0001
    cache.update(k[:, :, :1], k[:, :, :1], 0)
    assert cache.get_seq_length() == 6
    cache.crop(-2)
    assert cache.get_seq_length() == 4
    with pytest.raises(ValueError, match="kv_format"):
        octattn.hf.QuantizedCache("int4")
    with pytest.raises(ValueError, match="group"):
        octattn.hf.QuantizedCache("int8", group=24).update(k, k, 0)
    with pytest.raises(ValueError, match="qk"):
        octattn.hf.QuantizedCache("fp8_e4m3", qk="int8")


def test_kivi_keys_scale_each_channel_over_its_block():
    """QuantizedCache(key_rows=n): each block of n keys has one scale per channel, the
    absmax of the tokens it holds / 127, also while it fills a token at a time (the block
    stored again whole) and after a crop into it; values stay by token and group; the
    attention reads them with k_scale_rows n."""
    n = 4
    cache = octattn.hf.QuantizedCache("int8", group=16, key_rows=n)
    torch.manual_seed(5)
    k = torch.randn(1, 2, 11, 32)
    k[..., 3] *= 40  # an outlier channel
    keys, _ = cache.update(k[:, :, :6], k[:, :, :6], 0)
    layer = cache.layers[0]
    for t in range(6, 11):
        keys, values = cache.update(k[:, :, t:t + 1], k[:, :, t:t + 1], 0)
        rows = t + 1
        for b in range(-(-rows // n)):
            want = k[:, :, b * n:min(rows, (b + 1) * n)].abs().amax(dim=2) / 127
            torch.testing.assert_close(layer.k_scale[:, :, b], want, rtol=1e-6, atol=0)
    assert keys.shape == (1, 2, 11, 32) and layer.k_scale.shape[3] == 32
    assert layer.v_scale.shape[3] == 2
    got = _dequantize(layer, keys, layer.k_scale[:, :, :3], keys=True)
    assert (got - k).abs().amax(dim=2).le(layer.k_scale[:, :, :3].amax(dim=2) / 2 * 1.0001).all()
    kw = layer.attention_kwargs(keys)
    assert kw["k_scale_rows"] == n and kw["k_scale"].shape[2] == 3
    q = torch.randn(1, 4, 1, 32)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, got.repeat_interleave(2, 1), _dequantize(layer, values, kw["v_scale"])
        .repeat_interleave(2, 1))
    torch.testing.assert_close(octattn.attention(q, keys, values, **kw), ref, atol=1e-5,
                               rtol=0)
    # A crop into the last block, then a token: the block's scale is that of its tokens.
    cache.crop(-2)
    keys, _ = cache.update(k[:, :, 9:10] * 3, k[:, :, 9:10], 0)
    want = torch.cat([k[:, :, 8:9], k[:, :, 9:10] * 3], dim=2).abs().amax(dim=2) / 127
    torch.testing.assert_close(layer.k_scale[:, :, 2], want, rtol=1e-6, atol=0)
    # A crop into an earlier block keeps that block's stored values as its rows.
    cache.crop(-5)
    assert cache.get_seq_length() == 5 and layer.k_tail.shape[2] == 1
    cache.update(k[:, :, 5:6], k[:, :, 5:6], 0)
    assert cache.get_seq_length() == 6
    with pytest.raises(ValueError, match="key_rows"):
        octattn.hf.QuantizedCache("q8_0", key_rows=4)


@pytest.mark.parametrize("kv_format", ["int8", "q8_0", "q4_0"])
def test_quantized_cache_computes_q_k_in_int8_when_asked(kv_format):
    """QuantizedCache(qk="int8"): every step's attention is octattn.attention's with
    qk="int8" on the same rows (the layer hands the option over), which differs from the
    exact call's."""
    cache = octattn.hf.QuantizedCache(kv_format, group=32, qk="int8")
    torch.manual_seed(3)
    k, v, q = torch.randn(1, 2, 40, 64), torch.randn(1, 2, 40, 64), torch.randn(1, 4, 1, 64)
    keys, values = cache.update(k, v, 0)
    kw = cache.layers[0].attention_kwargs(keys)
    assert kw["qk"] == "int8"
    o = octattn.attention(q, keys, values, **kw)
    exact = {a: b for a, b in kw.items() if a != "qk"}
    assert not torch.equal(o, octattn.attention(q, keys, values, **exact))
    assert (o - octattn.attention(q, keys, values, **exact)).abs().max() < 0.05
