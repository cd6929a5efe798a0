#!/usr/bin/env bash
# liboffload links alone: build tests/offload/consumer.c with a plain
# compiler line against libstrata_offload (static, then shared), no MPI and
# no other strata library, and run it.
set -eu
BUILD=${BUILD:-build}
CC=${CC:-cc}
lib=$BUILD/lib/libstrata_offload.a
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if nm -u "$lib" | grep -iE ' (MPI|ompi|H5|lua|cblas|criterion|tensor_|comm_|optim_|par_)' ; then
  echo "consumer.sh: libstrata_offload.a needs symbols from outside liboffload (above)" >&2
  exit 1
fi
# A CUDA build carries the CUDA device tier: add the CUDA runtime (and only it).
extra=() allowed='^$'
if nm "$lib" 2>/dev/null | grep -q ' T offload_cuda_open'; then
  cuda=${CUDA_HOME:-/usr/local/cuda}
  extra=(-L"$cuda/lib64" -Wl,-rpath,"$cuda/lib64" -lcudart -lstdc++)
  allowed='libcudart'
fi
flags=(-std=gnu11 -O2 -Wall -Wextra -Werror -Iinclude -Iliboffload/include)
if [ -n "${SANITIZE:-}" ]; then flags+=(-fsanitize="$SANITIZE"); fi
"$CC" "${flags[@]}" -o "$out/consumer_static" tests/offload/consumer.c "$lib" "${extra[@]}"
"$CC" "${flags[@]}" -o "$out/consumer_shared" tests/offload/consumer.c -L"$BUILD/lib" \
  -Wl,-rpath,"$PWD/$BUILD/lib" -lstrata_offload
for b in consumer_static consumer_shared; do
  if ldd "$out/$b" | grep -vE "$allowed" | grep -iE 'libmpi|libhdf5|liblua|openblas|criterion|cuda'; then
    echo "consumer.sh: $b pulls in a library liboffload must not need (above)" >&2
    exit 1
  fi
  TMPDIR=$out "$out/$b"
done
