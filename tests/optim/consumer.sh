#!/usr/bin/env bash
# liboptim links alone: build tests/optim/consumer.c with a plain compiler
# line against libstrata_optim (static, then shared), no MPI and no other
# strata library, check that neither archive nor binary wants MPI, and run it.
set -eu
BUILD=${BUILD:-build}
CC=${CC:-cc}
lib=$BUILD/lib/libstrata_optim.a
so=$BUILD/lib/libstrata_optim.so
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
extra=()
# A CUDA build carries the multi-tensor kernels: add the CUDA runtime.
if nm "$lib" 2>/dev/null | grep -q ' T optim_cuda_run'; then
  cuda=${CUDA_HOME:-/usr/local/cuda}
  extra=(-L"$cuda/lib64" -Wl,-rpath,"$cuda/lib64" -lcudart -lstdc++)
fi
if nm -u "$lib" | grep -iE ' (MPI|ompi|H5|lua|cblas|criterion|tensor_|comm_|offload_|par_)' ; then
  echo "consumer.sh: libstrata_optim.a needs symbols from outside liboptim (above)" >&2
  exit 1
fi
flags=(-std=gnu11 -O2 -Wall -Wextra -Werror -Iinclude -Iliboptim/include)
# A sanitizer build's archive needs the sanitizer runtimes at link time.
if [ -n "${SANITIZE:-}" ]; then flags+=(-fsanitize="$SANITIZE"); fi
"$CC" "${flags[@]}" -o "$out/consumer_static" tests/optim/consumer.c "$lib" -fopenmp -lm "${extra[@]}"
"$CC" "${flags[@]}" -o "$out/consumer_shared" tests/optim/consumer.c -L"$BUILD/lib" \
  -Wl,-rpath,"$PWD/$BUILD/lib" -lstrata_optim -fopenmp -lm
for b in consumer_static consumer_shared; do
  if ldd "$out/$b" | grep -iE 'libmpi|libhdf5|liblua|openblas|criterion'; then
    echo "consumer.sh: $b pulls in a library liboptim must not need (above)" >&2
    exit 1
  fi
  "$out/$b"
done
