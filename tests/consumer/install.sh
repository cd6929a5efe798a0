#!/usr/bin/env bash
# A user's project using an installed strata: `make install` under a scratch
# prefix puts every library, its headers, its pkg-config file and the strata
# executable there. Then, with no strata source tree on any path and no
# -fopenmp of the consumer's own:
#   - the pkg-config files ask nothing of a consumer's compiler (no -fopenmp in
#     Cflags, none in the shared Libs);
#   - the C examples of libcomm's, libtensor's and liboptim's READMEs (so the
#     READMEs cannot rot) and libparallel's example program build against the
#     shared libraries (pkg-config --libs) and, from a copy of the prefix with
#     no shared strata libraries, statically (pkg-config --static --libs:
#     Libs.private must name everything the archives need), and run;
#   - the installed strata runs (--version, info).
set -eu
BUILD=${BUILD:-build}
prefix=$(realpath -m "$BUILD/prefix")
static=$(realpath -m "$BUILD/prefix-static")
rm -rf "$prefix" "$static"
make --no-print-directory BUILD="$BUILD" PREFIX="$prefix" install >/dev/null
make --no-print-directory BUILD="$BUILD" PREFIX="$static" install >/dev/null
rm -f "$static"/lib/libstrata_*.so # what is left to link are the archives
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "consumer: $*" >&2; exit 1; }
san=${SANITIZE:+-fsanitize=$SANITIZE}
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"

for lib in comm tensor optim offload parallel; do
  pkg-config --exists "strata-$lib" || fail "no pkg-config file for strata-$lib"
  for q in --cflags --libs "--static --cflags"; do
    # shellcheck disable=SC2086
    if pkg-config $q "strata-$lib" | grep -q -- '-fopenmp'; then
      fail "pkg-config $q strata-$lib imposes a compiler mode: $(pkg-config $q "strata-$lib")"
    fi
  done
done

# build NAME LIB SOURCE: app (shared) and app-static (the archives), then
# checks what each loads
build() {
  local name=$1 lib=$2 src=$3
  # shellcheck disable=SC2046
  cc -std=c11 -Wall -Werror $san -o "$work/$name" "$src" $(pkg-config --cflags --libs "strata-$lib") \
    || fail "$name does not build against the installed strata-$lib"
  ldd "$work/$name" | grep -q "not found" && { ldd "$work/$name"; fail "$name: a library is not found"; }
  ldd "$work/$name" | grep -q "$prefix/lib/libstrata_$lib.so" || fail "$name does not load libstrata_$lib.so"
  # shellcheck disable=SC2046
  cc -std=c11 -Wall -Werror $san -o "$work/$name-static" "$src" \
    $(PKG_CONFIG_PATH="$static/lib/pkgconfig" pkg-config --static --cflags --libs "strata-$lib") \
    || fail "$name does not link statically with pkg-config --static --libs strata-$lib"
  if ldd "$work/$name-static" | grep -q libstrata_; then fail "$name-static loads a shared strata library"; fi
}
# the C block of a README
readme_example() { sed -n '/^```c$/,/^```$/p' "$1" | sed '1d;$d' >"$2"; }

readme_example libcomm/README.md "$work/comm.c"
build comm comm "$work/comm.c"
for app in comm comm-static; do
  mpirun --timeout 60 -np 2 --bind-to none "$work/$app" >/dev/null || fail "$app on 2 ranks"
done
mpirun --timeout 60 -np 4 --bind-to none "$work/comm" >/dev/null || fail "comm on 4 ranks"

readme_example libtensor/README.md "$work/tensor.c"
build tensor tensor "$work/tensor.c"
readme_example liboptim/README.md "$work/optim.c"
build optim optim "$work/optim.c"
for app in tensor tensor-static optim optim-static; do
  "$work/$app" >"$work/$app.out" || fail "$app: $(cat "$work/$app.out")"
done

build engine parallel tests/train/example_engine.c
mkdir -p "$work/run"
"$work/engine-static" "$work/run" >"$work/engine.out" 2>&1 || fail "example_engine (static): $(tail -3 "$work/engine.out")"

# the executable
[ "$("$prefix/bin/strata" --version)" = "$("$BUILD/bin/strata" --version)" ] || fail "bin/strata --version"
"$prefix/bin/strata" info >"$work/info.out" 2>&1 || fail "bin/strata info: $(cat "$work/info.out")"
echo "consumer: make install: 5 libraries and bin/strata; README examples and example_engine built shared and static"
