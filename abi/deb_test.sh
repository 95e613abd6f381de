#!/bin/sh
# The Debian package of the build tree (cpack), installed by apt-get as a user installs
# it; install_test.cmake's four consumers then built and run against the system's paths
# alone; the package removed again whatever they did. Skips (77) without root or
# password-less sudo, without apt-get, or where a package named octattn is installed
# already (not ours to replace). Arguments: BUILD SOURCE WORK CMAKE CPACK CC.
set -u
build=$1 source=$2 work=$3 cmake=$4 cpack=$5 cc=$6
sudo=""
if [ "$(id -u)" != 0 ]; then
  sudo -n true 2>/dev/null || { echo "not root, no password-less sudo: skipped"; exit 77; }
  sudo="sudo -n"
fi
command -v apt-get >/dev/null || { echo "no apt-get: skipped"; exit 77; }
installed() { dpkg-query -W -f='${Status}' octattn 2>/dev/null | grep -q "ok installed"; }
if installed; then
  echo "a package named octattn is installed already: skipped"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work" || exit 1
"$cpack" -G DEB --config "$build/CPackConfig.cmake" -B "$work/deb" >"$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log"; exit 1; }
deb=$(ls "$work"/deb/octattn_*.deb) || exit 1
dpkg-deb -I "$deb" || exit 1
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -qq --no-install-recommends "$deb" || exit 1
"$cmake" -DSYSTEM=ON -DSOURCE="$source/install" -DWORK="$work" -DCC="$cc" \
  -P "$source/install_test.cmake"
rc=$?
$sudo apt-get purge -y -qq octattn || rc=1
if installed; then
  echo "octattn is still installed"
  rc=1
fi
exit $rc
