"""octattn.distributed's ring (or all-to-all) attention on P processes of this machine
against one process with P threads, as JSON lines.

    python3 bench/ring_torch.py --q-len 16384 --head-dim 128 --q-heads 8 [--kv-heads 8]
        [--ranks 2] [--algo ring|all_to_all] [--backward] [--repeat 2]
        [--octattn build/release/tools/octattn]

Each rank runs one thread (gloo over loopback); the single process runs `ranks` threads
on the whole sequence (torch.ops.octattn.attention). Causal f32, bhtd, the zigzag split.
Times are the best of --repeat calls (the slowest rank's, each call between barriers);
with --backward, forward + backward (the loss sum(o * w)). `efficiency` = the single
process's time / the ranks' time; `wait_seconds`: the slowest rank's time blocked on
its peers in the timed call (ring: per step, the shard exchange not hidden under the
compute; backward included with --backward), from octattn.distributed.last_stats().
The first line is `octattn bench --limits` where the tool is found.
"""
import argparse
import json
import os
import subprocess
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def inputs(a):
    g = torch.Generator().manual_seed(1)
    q = torch.randn((1, a.q_heads, a.q_len, a.head_dim), generator=g)
    k = torch.randn((1, a.kv_heads, a.q_len, a.head_dim), generator=g)
    v = torch.randn((1, a.kv_heads, a.q_len, a.head_dim), generator=g)
    w = torch.randn((1, a.q_heads, a.q_len, a.head_dim), generator=g)
    return q, k, v, w


def timed(fn, repeat, sync=None):
    best = None
    for _ in range(repeat):
        if sync:
            sync()
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        if sync:  # the slowest rank's time
            x = torch.tensor([dt], dtype=torch.float64)
            dist.all_reduce(x, op=dist.ReduceOp.MAX)
            dt = x.item()
        best = dt if best is None else min(best, dt)
    return best


def rank_main(rank, a, store, out):
    import octattn.distributed as od
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=a.ranks, timeout=timedelta(seconds=600))
    q, k, v, w = (od.shard(x) for x in inputs(a))
    fn = od.ring_attention if a.algo == "ring" else od.all_to_all_attention
    waits = []

    def call():
        if a.backward:
            qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))
            o = fn(qq, kk, vv)
            wait = od.last_stats()["wait_seconds"]
            (o * w).sum().backward()
            wait += od.last_stats()["wait_seconds"]
        else:
            fn(q, k, v)
            wait = od.last_stats()["wait_seconds"]
        waits.append(wait)

    seconds = timed(call, a.repeat, dist.barrier)
    x = torch.tensor([min(waits)], dtype=torch.float64)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"seconds": seconds, "wait_seconds": x.item()}, f)
    dist.destroy_process_group()


def single(a):
    import octattn.ops  # noqa: F401
    torch.set_num_threads(a.ranks)
    q, k, v, w = inputs(a)

    def call():
        if a.backward:
            qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))
            o, _ = torch.ops.octattn.attention(qq, kk, vv, causal=True)
            (o * w).sum().backward()
        else:
            torch.ops.octattn.attention(q, k, v, causal=True)

    return timed(call, a.repeat)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--q-len", type=int, default=16384)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--q-heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=0)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--algo", choices=("ring", "all_to_all"), default="ring")
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--octattn", default="build/release/tools/octattn")
    a = ap.parse_args()
    a.kv_heads = a.kv_heads or a.q_heads
    if os.path.exists(a.octattn):
        limits = subprocess.run([a.octattn, "bench", "--limits"], capture_output=True,
                                text=True).stdout.strip()
        print(json.dumps({"limits": limits}))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        mp.spawn(rank_main, args=(a, os.path.join(tmp, "store"), out), nprocs=a.ranks)
        with open(out) as f:
            ring = json.load(f)
    one = single(a)
    pairs = a.q_len * (a.q_len + 1) // 2 * a.q_heads
    flops = pairs * 4 * a.head_dim * (3.5 if a.backward else 1)
    print(json.dumps({
        "algo": a.algo, "ranks": a.ranks, "threads_per_rank": 1, "q_len": a.q_len,
        "head_dim": a.head_dim, "q_heads": a.q_heads, "kv_heads": a.kv_heads,
        "backward": a.backward, "seconds": round(ring["seconds"], 4),
        "wait_seconds": round(ring["wait_seconds"], 4),
        "single_seconds": round(one, 4), "single_threads": a.ranks,
        "efficiency": round(one / ring["seconds"], 3),
        "gflops": round(flops / ring["seconds"] / 1e9, 1)}))


if __name__ == "__main__":
    main()
