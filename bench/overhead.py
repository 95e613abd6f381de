"""Per-call cost of the Python package's entries on a problem too small to take time (one
query row, one key, head_dim 8, one thread), against the C call itself (`octattn bench`
on the same shape): what each way of calling adds.

    python bench/overhead.py [--tool build/release/tools/octattn] [--calls N]

Rows: octattn.attention on numpy arrays and on torch tensors; torch.ops.octattn.attention
eager (no gradient, and with inputs that require one: the autograd graph built) and under
torch.compile; the same operator registered in Python (OCTATTN_TORCH_NATIVE=0, in a
process of its own); a compiled x + 1, torch.compile's own cost of a call. Each figure is the best of 5 rounds of N calls (the machines are
shared: the best round is the least disturbed).
"""
import argparse
import json
import os
import subprocess
import sys
import timeit

MEASURE = r"""
import json, sys, timeit
import numpy as np, torch, octattn, octattn.ops
torch.set_num_threads(1)
octattn.set_threads(1)
n = int(sys.argv[1])
def best(f, calls=n):
    f()
    return min(timeit.repeat(f, number=calls, repeat=5)) / calls * 1e6
a = np.ones((1, 1, 1, 8), np.float32)
t = torch.ones(1, 1, 1, 8)
g = torch.ones(1, 1, 1, 8, requires_grad=True)
op = torch.ops.octattn.attention
out = {"native": octattn.ops.native}
if sys.argv[2] == "all":
    out["numpy"] = best(lambda: octattn.attention(a, a, a))
    out["torch"] = best(lambda: octattn.attention(t, t, t))
out["op eager"] = best(lambda: op(t, t, t))
out["op eager, inputs requiring grad"] = best(lambda: op(g, g, g))
f = torch.compile(lambda x: op(x, x, x)[0], fullgraph=True)
out["op compiled"] = best(lambda: f(t), max(n // 4, 1))
if sys.argv[2] == "all":  # what a compiled function costs a call whatever it runs
    h = torch.compile(lambda x: x + 1.0, fullgraph=True)
    out["compiled x + 1"] = best(lambda: h(t), max(n // 4, 1))
print(json.dumps(out))
"""


def measure(calls, which, env=None):
    r = subprocess.run([sys.executable, "-c", MEASURE, str(calls), which], env=env,
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tool", help="the octattn tool, for the C call's time")
    p.add_argument("--calls", type=int, default=20000)
    args = p.parse_args()
    c_us = None
    if args.tool:
        r = subprocess.run([args.tool, "bench", "--batch", "1", "--q-heads", "1", "--q-len", "1",
                            "--head-dim", "8", "--threads", "1", "--repeat", str(args.calls),
                            "--no-rss", "--json"], capture_output=True, text=True, check=True)
        c_us = json.loads(r.stdout.strip().splitlines()[-1])["seconds_median"] * 1e6
    native = measure(args.calls, "all")
    python = measure(args.calls, "ops", dict(os.environ, OCTATTN_TORCH_NATIVE="0"))
    rows = [("C call (octattn bench, median)", c_us)] if c_us is not None else []
    rows += [("octattn.attention, numpy", native["numpy"]),
             ("octattn.attention, torch", native["torch"])]
    for name in ("op eager", "op eager, inputs requiring grad", "op compiled"):
        label = name.replace("op", "torch.ops.octattn.attention", 1)
        if native["native"]:
            rows.append((label + " (native)", native[name]))
        rows.append((label + " (Python op)", python[name]))
    rows.append(("torch.compile of x + 1 (torch's own cost of a compiled call)",
                 native["compiled x + 1"]))
    print("| call | us per call | above the C call |")
    print("| --- | --- | --- |")
    for name, us in rows:
        above = "" if c_us is None or us is c_us or "x + 1" in name else "%.2f" % (us - c_us)
        print("| %s | %.2f | %s |" % (name, us, above))


if __name__ == "__main__":
    main()
