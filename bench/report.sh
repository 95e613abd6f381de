#!/usr/bin/env bash
# The standard benchmark matrix, as JSON lines on stdout (one per case), so runs can
# be compared across commits. Takes tens of minutes on one core; BENCH_QUICK=1 skips
# the longest sequences. Usage: bash bench/report.sh [path/to/octattn] > results.jsonl
set -euo pipefail
bin="${1:-build/release/tools/octattn}"
long="8192,16384"
[ "${BENCH_QUICK:-0}" = 1 ] && long="8192"
"$bin" bench --limits --json
# Naive against the reference and across backends and targets (one thread).
"$bin" bench --json --q-len 512,2048 --head-dim 64,128 --algo naive --backend highway,xsimd --target avx512,avx2
"$bin" bench --json --q-len 8192 --head-dim 64,128 --algo naive --backend highway,xsimd --target avx512,avx2 --repeat 1
"$bin" bench --json --q-len 512,2048 --head-dim 64,128 --algo reference --repeat 1 --no-rss
# Fused prefill: MHA 8/8 and GQA 32/8, one and two threads.
for heads in "8 8" "32 8"; do
  set -- $heads
  "$bin" bench --json --q-heads "$1" --kv-heads "$2" --q-len 512,2048 --head-dim 64,128 --algo fused,naive --threads 1,2
  "$bin" bench --json --q-heads "$1" --kv-heads "$2" --q-len "$long" --head-dim 64,128 --algo fused --threads 1,2 --repeat 1
done
# Memory: naive against fused.
"$bin" bench --json --q-len 1024,8192 --head-dim 128 --algo naive,fused --repeat 1
# Decode against a KV cache.
"$bin" bench --json --q-len 1 --kv-len 4096,16384,65536 --q-heads 32 --kv-heads 8 --head-dim 128 --algo fused --threads 1,2 --repeat 20
# Sliding windows against plain causal.
"$bin" bench --json --q-len 16384 --head-dim 64 --algo fused --repeat 1
"$bin" bench --json --q-len 16384 --head-dim 64 --window 512 --algo fused --repeat 3
"$bin" bench --json --q-len 16384 --head-dim 64 --window 512 --stride 64 --algo fused --repeat 3
