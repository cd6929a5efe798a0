#!/usr/bin/env bash
# Installs the Debian packages strata needs to build and test, if missing.
# Called by `make test`, `make run` and `make bench`; harmless when all is there.
# As root it installs them; otherwise it prints the exact command and fails.
set -eu

PKGS="libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools liblua5.4-dev
lua5.4 libcriterion-dev libopenblas-dev pkg-config gnuplot-nox make gcc"

missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing="$missing $p"
done
[ -z "$missing" ] && exit 0

line="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" != 0 ]; then
  echo "strata: missing system packages:$missing" >&2
  echo "strata: install them as root with:" >&2
  echo "  $line" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "strata: missing packages:$missing, and no apt-get on this machine (strata targets Debian 12)" >&2
  exit 1
fi
echo "strata: installing$missing"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "strata: system packages ready"
