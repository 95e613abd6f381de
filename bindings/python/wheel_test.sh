#!/usr/bin/env bash
# The self-contained wheel as a user meets it: built by wheel.sh, installed into a fresh
# virtual environment, and the package's tests run there with the system's libhwy and
# libtbb and the build's liboctattn out of sight (a mount namespace binds /dev/null over
# the libraries and an empty folder over the folders given), so that a library the wheel
# does not carry fails the test. The tests' own imports (numpy, pytest, torch,
# transformers) come from PYTHON's environment, which the fresh one lists after its own
# site-packages. Skips (77) where no mount namespace can be made (not root).
#   bash wheel_test.sh WORK PYTHON HIDDEN_DIR...
# (PYTHON: the tests' interpreter, with the build requirements installed; the environment
# variables of wheel.sh apply.)
set -euo pipefail
work=$1 python=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
  echo "no mount namespace (not root): skipped"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work/empty"
bash "$here/wheel.sh" "$work/wheelhouse" "$python" --no-build-isolation
wheel=$(ls "$work"/wheelhouse/octattn-*manylinux*.whl)
"$python" -m venv "$work/venv"
venv=$work/venv
"$venv/bin/pip" install -q --no-deps --no-index "$wheel"
site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
"$python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" >"$site/test-env.pth"
# Every file the loader would take for libhwy.so.1 and libtbb.so.12.
hide=$(ldconfig -p | awk '/(libhwy|libtbb)[.]so[.]/ {print $NF}' | xargs -r readlink -f | sort -u)
[ -n "$hide" ] || { echo "found no system libhwy or libtbb to hide"; exit 1; }
echo "hidden: $hide $*"
unshare -m --propagation private bash -euo pipefail -c '
  venv=$1 empty=$2 tests=$3 hide=$4
  shift 4
  for f in $hide; do mount --bind /dev/null "$f"; done
  for d in "$@"; do [ ! -d "$d" ] || mount --bind "$empty" "$d"; done
  unset LD_LIBRARY_PATH PYTHONPATH
  # The package and every library it loaded come from the fresh environment.
  "$venv/bin/python" - "$venv" <<"PY"
import sys, numpy as np, octattn
venv = sys.argv[1]
assert octattn.__file__.startswith(venv), octattn.__file__
q = np.ones((1, 2, 4, 8), np.float32)
octattn.attention(q, q, q)
maps = {line.split()[-1] for line in open("/proc/self/maps") if "/" in line}
libs = sorted(p for p in maps if any(n in p for n in ("liboctattn", "libhwy", "libtbb")))
print("\n".join(libs))
assert len(libs) == 3 and all(p.startswith(venv) for p in libs), libs
PY
  # Not test_distributed.py: its process groups run the same Python over the same
  # extension (packages.python runs them), about 30 s of spawned ranks here.
  cd "$tests" && exec "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    --ignore=test_distributed.py .
' unshare "$venv" "$work/empty" "$here/tests" "$hide" "$@"
