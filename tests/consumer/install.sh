#!/usr/bin/env bash
# A user's project linking one strata library: install strata under a
# scratch prefix, build the README example of libcomm with pkg-config alone
# (no strata source tree on the include path), and run it under mpirun.
set -eu
BUILD=${BUILD:-build}
prefix=$(realpath -m "$BUILD/prefix")
rm -rf "$prefix"
make --no-print-directory BUILD="$BUILD" PREFIX="$prefix" install-comm >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# the example is the C block of libcomm/README.md, so the README cannot rot
sed -n '/^```c$/,/^```$/p' libcomm/README.md | sed '1d;$d' >"$work/app.c"
san=${SANITIZE:+-fsanitize=$SANITIZE}
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror $san -o "$work/app" "$work/app.c" $(pkg-config --cflags --libs strata-comm)
if ldd "$work/app" | grep -q "not found"; then ldd "$work/app"; exit 1; fi
mpirun --timeout 60 -np 2 --bind-to none "$work/app"
mpirun --timeout 60 -np 4 --bind-to none "$work/app"
