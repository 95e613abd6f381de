"""The peers on the shapes of `octattn bench`, as JSON lines with the same fields.

    python3 bench/peers.py --q-len 512,2048 --head-dim 64,128 [--threads 1] [--window W]

Peers, where installed: PyTorch scaled_dot_product_attention (CPU; causal, or an
explicit boolean mask for windows), the by-hand PyTorch path (matmul, masked_fill,
softmax, matmul), and the by-hand NumPy path (OpenBLAS sgemm, softmax, sgemm). GFLOP/s
counts useful work only, as octattn does: 2 * (head_dim + value_dim) per allowed pair.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def allowed_pairs(q_len, kv_len, window, stride):
    n = 0
    for i in range(q_len):
        qpos = kv_len - q_len + i
        hi = min(qpos + 1, kv_len)
        if hi <= 0:
            continue
        lo = min(max(qpos - window + 1, 0), hi) if window else 0
        n += hi - lo
        if window and stride and lo > 0:
            n += (lo - 1) // stride + 1
    return n


def mask(q_len, kv_len, window, stride, torch):
    rows = torch.arange(q_len).unsqueeze(1) + (kv_len - q_len)
    cols = torch.arange(kv_len).unsqueeze(0)
    d = rows - cols
    allowed = d >= 0
    if window:
        local = d < window
        if stride:
            local = local | (cols % stride == 0)
        allowed = allowed & local
    return allowed


def run_case(peer, args, q_len, kv_len, dim):
    """One case in this (fresh) process: median, min, max seconds and the peak RSS
    growth of the first call, in MiB."""
    heads, kv_heads, batch = args.q_heads, args.kv_heads or args.q_heads, args.batch
    if peer.startswith("torch"):
        import torch
        torch.set_num_threads(args.threads)
        g = torch.Generator().manual_seed(0)
        q = torch.rand(batch, heads, q_len, dim, generator=g) * 2 - 1
        k = torch.rand(batch, kv_heads, kv_len, dim, generator=g) * 2 - 1
        v = torch.rand(batch, kv_heads, kv_len, dim, generator=g) * 2 - 1
        if kv_heads != heads:
            k = k.repeat_interleave(heads // kv_heads, dim=1)
            v = v.repeat_interleave(heads // kv_heads, dim=1)
        m = mask(q_len, kv_len, args.window, args.stride, torch)
        square = q_len == kv_len and not args.window

        def call():
            if peer == "torch_sdpa":
                with torch.no_grad():
                    if square:
                        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)
            with torch.no_grad():
                s = (q @ k.transpose(-2, -1)) / dim ** 0.5
                s = s.masked_fill(~m, float("-inf"))
                return s.softmax(dim=-1) @ v
    else:
        import numpy as np
        rng = np.random.default_rng(0)
        q = rng.uniform(-1, 1, (batch, heads, q_len, dim)).astype(np.float32)
        k = rng.uniform(-1, 1, (batch, kv_heads, kv_len, dim)).astype(np.float32)
        v = rng.uniform(-1, 1, (batch, kv_heads, kv_len, dim)).astype(np.float32)
        group = heads // kv_heads
        import torch  # only for the mask construction when present
        m = mask(q_len, kv_len, args.window, args.stride, torch).numpy()

        def call():
            out = np.empty((batch, heads, q_len, dim), np.float32)
            for b in range(batch):
                for h in range(heads):
                    s = q[b, h] @ k[b, h // group].T * np.float32(dim ** -0.5)
                    s[~m] = -np.inf
                    s -= s.max(axis=1, keepdims=True)
                    np.exp(s, out=s)
                    s /= s.sum(axis=1, keepdims=True)
                    out[b, h] = s @ v[b, h // group]
            return out
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    call()
    extra = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times), extra


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
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--peers", default="torch_sdpa,torch_by_hand,numpy_by_hand")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: one case in a child
    args = ap.parse_args()
    if args.one:
        peer, q_len, kv_len, dim = args.one.split(":")
        print(json.dumps(run_case(peer, args, int(q_len), int(kv_len), int(dim))))
        return
    for q_len in map(int, args.q_len.split(",")):
        for kv_len in (map(int, args.kv_len.split(",")) if args.kv_len else [q_len]):
            for dim in map(int, args.head_dim.split(",")):
                for peer in args.peers.split(","):
                    env = dict(os.environ)
                    # Old OpenBLAS settings of this environment slow current builds.
                    env.pop("OPENBLAS_CORETYPE", None)
                    env.pop("OPENBLAS_L2_SIZE", None)
                    env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = str(args.threads)
                    cmd = [sys.executable, __file__, "--one", f"{peer}:{q_len}:{kv_len}:{dim}"] + [
                        a for a in sys.argv[1:]]
                    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
                    if r.returncode != 0:
                        print(json.dumps({"peer": peer, "error": r.stderr.strip().splitlines()[-1:]}))
                        continue
                    med, lo, hi, extra = json.loads(r.stdout)
                    flops = 2.0 * 2 * dim * allowed_pairs(q_len, kv_len, args.window, args.stride) * \
                        args.batch * args.q_heads
                    print(json.dumps({
                        "peer": peer, "threads": args.threads, "batch": args.batch, "q_heads": args.q_heads,
                        "kv_heads": args.kv_heads or args.q_heads, "q_len": q_len, "kv_len": kv_len,
                        "head_dim": dim, "window": args.window, "stride": args.stride,
                        "seconds_median": med, "seconds_min": lo, "seconds_max": hi,
                        "gflops": flops / med / 1e9, "extra_rss_mib": extra}), flush=True)


if __name__ == "__main__":
    main()
