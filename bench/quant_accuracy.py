#!/usr/bin/env python3
"""The accuracy of each quantized KV cache format: the error of its stored values and of
the attention output against the same call on the f32 cache, on plain normal data and on
keys with a few outlier channels (10-50x the rest, as trained models' keys have).

    python3 bench/quant_accuracy.py [--heads 32 --kv-heads 8 --kv-len 4096 --head-dim 128]
    python3 bench/quant_accuracy.py --model [--new-tokens 64]

Prints a Markdown table: per format, max |stored - x| / max|x| of keys and values, and
max |o - o_f32| / max|v| and its mean over the outputs (decode: one query per head),
for the integer formats also with q . k in int8 (qk="int8", OCTATTN_QK_INT8).
--model: a tiny transformers Llama instead (random weights; then with four key
channels of each kv head 10-50x the rest, as trained models have), greedy generation with octattn.hf.QuantizedCache in each format
against the f32 cache: the tokens that match before the first difference, and the
largest logit difference over those steps relative to the largest logit."""
import argparse

import numpy as np

import octattn


def data(rng, args, outliers):
    B, H, T, D = 1, args.kv_heads, args.kv_len, args.head_dim
    q = rng.standard_normal((B, args.heads, 1, D), dtype=np.float32)
    k = rng.standard_normal((B, H, T, D), dtype=np.float32)
    v = rng.standard_normal((B, H, T, D), dtype=np.float32)
    if outliers:
        for h in range(H):
            ch = rng.choice(D, 4, replace=False)
            k[:, h, :, ch] *= rng.uniform(10, 50, size=(4, 1, 1)).astype(np.float32)
    return q, k, v


def stored(x, fmt, group, rows):
    """x stored in `fmt` by octattn.kv_store: the cache, its scales, its f32 values."""
    B, H, T, D = x.shape
    if fmt == "int8":
        cache = np.empty(x.shape, np.int8)
        per = D // group if rows == 1 else D
        scale = np.empty((B, H, T // rows, per), np.float32)
        octattn.kv_store(x, cache, scale, scale_rows=rows)
        s = np.repeat(scale, D // per, axis=3) if rows == 1 else np.repeat(scale, rows, axis=2)
        return cache, scale, (s * cache).astype(np.float32)
    if fmt.startswith("fp8"):
        import torch
        dt = torch.float8_e4m3fn if fmt == "fp8_e4m3" else torch.float8_e5m2
        amax = np.abs(x).max(axis=(0, 2, 3), keepdims=True)  # vLLM's per-head scale
        big = 448.0 if fmt == "fp8_e4m3" else 57344.0
        scale = (amax / big).astype(np.float32)
        cache = torch.empty(x.shape, dtype=dt)
        octattn.kv_store(x, cache, scale)
        return cache, scale, (cache.float().numpy() * scale).astype(np.float32)
    unit = 34 if fmt == "q8_0" else 18
    cache = np.empty((B, H, T, D // 32 * unit), np.uint8)
    octattn.kv_store(x, cache, kv_format=fmt)
    b = cache.reshape(B, H, T, D // 32, unit)
    d = b[..., :2].copy().view(np.float16).astype(np.float32)
    if fmt == "q8_0":
        qv = b[..., 2:].view(np.int8).astype(np.float32)
    else:
        qv = np.concatenate([b[..., 2:] & 15, b[..., 2:] >> 4], axis=-1).astype(np.float32) - 8
    return cache, None, (d * qv).reshape(x.shape).astype(np.float32)


def model_report(new_tokens):
    import torch
    import transformers

    import octattn.hf
    octattn.hf.register()
    kv_heads, d = 2, 64
    config = transformers.LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=512,
                                      num_hidden_layers=4, num_attention_heads=8,
                                      num_key_value_heads=kv_heads, head_dim=d,
                                      max_position_embeddings=1024)
    ids = torch.randint(1, config.vocab_size, (1, 64), generator=torch.Generator().manual_seed(1))
    print(f"| keys | format | G | tokens equal to the f32 cache's (of {new_tokens}) "
          "| max abs(logit - logit_f32) / max abs(logit_f32) before the first difference |")
    print("| --- | --- | --- | --- | --- |")
    for outliers in (False, True):
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config).eval()
        if outliers:  # four channels of each kv head's keys 10-50x the rest
            rng = np.random.default_rng(0)
            with torch.no_grad():
                for layer in model.model.layers:
                    for h in range(kv_heads):
                        for ch in rng.choice(d, 4, replace=False):
                            layer.self_attn.k_proj.weight[h * d + ch] *= float(rng.uniform(10, 50))
        model.set_attn_implementation("octattn")

        def generate(cache):
            with torch.no_grad():
                out = model.generate(input_ids=ids, cache=cache, max_new_tokens=new_tokens,
                                     do_sample=False, pad_token_id=0, output_logits=True,
                                     return_dict_in_generate=True)
            return out.sequences[0, ids.shape[1]:], torch.stack(out.logits)

        tokens32, logits32 = generate(transformers.DynamicCache())
        # (key_rows 32: KIVI, keys by channel in blocks of 32 tokens, values by group)
        for fmt, group, qk, key_rows in (
                ("int8", 32, "exact", 0), ("int8", 32, "int8", 0), ("int8", 64, "exact", 0),
                ("int8", 32, "exact", 32), ("fp8_e4m3", 0, "exact", 0),
                ("fp8_e5m2", 0, "exact", 0), ("q8_0", 32, "exact", 0), ("q8_0", 32, "int8", 0),
                ("q4_0", 32, "exact", 0), ("q4_0", 32, "int8", 0)):
            tokens, logits = generate(octattn.hf.QuantizedCache(fmt, group=group or 32, qk=qk,
                                                                key_rows=key_rows))
            differ = (tokens != tokens32).nonzero()
            same = int(differ[0]) if len(differ) else new_tokens
            steps = max(same, 1)
            rel = (logits[:steps] - logits32[:steps]).abs().max() / logits32[:steps].abs().max()
            name = fmt + (" qk int8" if qk == "int8" else "") + (
                f" KIVI (keys by channel, {key_rows} rows)" if key_rows else "")
            print(f"| {'outliers' if outliers else 'normal'} | {name} | {group or 'unscaled'} "
                  f"| {same} | {float(rel):.2e} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--kv-len", type=int, default=4096)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--model", action="store_true")
    ap.add_argument("--new-tokens", type=int, default=64)
    args = ap.parse_args()
    if args.model:
        return model_report(args.new_tokens)
    formats = [("int8", 32, 1), ("int8", 64, 1), ("int8", args.head_dim, 1), ("int8 KIVI", 1, 32),
               ("fp8_e4m3", 0, 1), ("fp8_e5m2", 0, 1), ("q8_0", 32, 1), ("q4_0", 32, 1)]
    print("| keys | format | G | max err k / max|k| | max err v / max|v| | "
          "max |o - o_f32| / max|v| | mean |o - o_f32| / max|v| | qk int8: max | qk int8: mean |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for outliers in (False, True):
        q, k, v = data(np.random.default_rng(0), args, outliers)
        o32 = octattn.attention(q, k, v)
        for name, group, rows in formats:
            fmt = name.split()[0]
            kc, ks, kd = stored(k, fmt, group, rows)
            vc, vs, vd = stored(v, fmt, group if rows == 1 else 32, 1)
            kw = {}
            if fmt == "int8":
                kw = dict(k_scale=ks, v_scale=vs, k_scale_rows=rows)
            elif fmt.startswith("fp8"):
                import torch
                kw = dict(k_scale=torch.from_numpy(ks), v_scale=torch.from_numpy(vs))
                q_in = torch.from_numpy(q)
            else:
                kw = dict(kv_format=fmt)
            o = octattn.attention(q_in if fmt.startswith("fp8") else q, kc, vc, **kw)
            o = np.asarray(o)
            vmax = np.abs(v).max()
            err = np.abs(o - o32) / vmax
            qk = "| - | - |"
            if not fmt.startswith("fp8"):
                e8 = np.abs(np.asarray(octattn.attention(q, kc, vc, qk="int8", **kw)) - o32) / vmax
                qk = f"| {e8.max():.2e} | {e8.mean():.2e} |"
            print(f"| {'outliers' if outliers else 'normal'} | {name} | {group if group else 'per head'} "
                  f"| {np.abs(kd - k).max() / np.abs(k).max():.2e} "
                  f"| {np.abs(vd - v).max() / vmax:.2e} | {err.max():.2e} | {err.mean():.2e} {qk}")


if __name__ == "__main__":
    main()
