#!/usr/bin/env bash
# The source distribution as a user meets it: `python -m build --sdist` of the clone, its
# files checked against the sources a build needs (every tracked file of CMakeLists.txt,
# pyproject.toml, the symbol map, cmake/, include/, lib/ and the package's folder but its
# scripts), then `pip install octattn-*.tar.gz` into a fresh virtual environment, which
# compiles the library from the sdist's sources (only this machine's SIMD targets, each
# lane width once, unoptimized: the packaging is under test here, not the kernels, and
# -O0 compiles in two thirds of the time), and the installed package checked against
# float64 math. The build requirements (build, scikit-build-core, nanobind) and numpy come
# from PYTHON's environment, which the fresh one lists after its own site-packages.
#   bash sdist_test.sh WORK PYTHON
set -euo pipefail
work=$1 python=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"
"$python" -m build --sdist --no-isolation -o "$work/dist" "$src" >"$work/build.log"
sdist=$(ls "$work"/dist/octattn-*.tar.gz)
echo "sdist: $(basename "$sdist"), $(stat -c %s "$sdist") bytes"
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$src" ls-files CMakeLists.txt pyproject.toml abi/octattn.map cmake include lib \
    bindings/python \
    | grep -v '^bindings/python/[^/]*\.sh$' >"$work/needed"
  "$python" - "$sdist" "$work/needed" <<'PY'
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    have = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
missing = [f for f in open(sys.argv[2]).read().split() if f not in have]
assert not missing, f"not in the sdist: {missing}"
assert not any(n.startswith(("fuzz/", "tests/", "build/")) for n in have), "stray files"
PY
fi
"$python" -m venv "$work/venv"
venv=$work/venv
site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
"$python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" >"$site/test-env.pth"
defines="OCTATTN_HOST_TARGETS_ONLY=ON;OCTATTN_LEAN_TARGETS=ON;OCTATTN_TORCH_OPS=OFF"
defines+=";CMAKE_CXX_FLAGS_DEBUG=-O0;CMAKE_C_FLAGS_DEBUG=-O0"
SKBUILD_CMAKE_BUILD_TYPE=Debug SKBUILD_CMAKE_DEFINE="$defines" \
  "$venv/bin/pip" install -q --no-deps --no-build-isolation "$sdist"
cd "$work" && "$venv/bin/python" - "$venv" <<'PY'
import sys
import numpy as np
import octattn
assert octattn.__file__.startswith(sys.argv[1]), octattn.__file__
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 2, 9, 16), dtype=np.float32) for _ in range(3))
o = octattn.attention(q, k, v, window=4)
s = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2) / 4.0
i, j = np.arange(9)[:, None], np.arange(9)[None, :]
s[..., (j > i) | (i - j >= 4)] = -np.inf
p = np.exp(s - s.max(-1, keepdims=True))
want = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
err = np.abs(o - want).max()
assert err < 1e-5, err
print("installed from the sdist:", octattn.__file__, octattn.last_run(), "error", err)
PY
