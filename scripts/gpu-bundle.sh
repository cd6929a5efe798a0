#!/usr/bin/env bash
# gpu-bundle.sh DEST "TESTS..." "BENCHES..." ["MPI TESTS..."]: a folder that
# runs strata's GPU tests on a machine that has the CUDA driver and toolkit
# but none of strata's other dependencies. Programs go to DEST/tests and
# DEST/bench; every shared library they need that is not glibc or CUDA is
# copied to DEST/lib (found through LD_LIBRARY_PATH set by DEST/run.sh).
# Programs that link Open MPI run as isolated singletons with the bundled MPI
# plugins: one GPU, one rank. The MPI tests (names of TESTS, NAME:N for N
# ranks) run once more with 2 (or N) ranks under mpirun, the parallel layouts on one GPU (ranks sharing
# it: libcomm stages their device collectives through the host): Open MPI's
# mpirun travels too (DEST/bin/mpirun, with its PMIx plugins and help
# texts), relocated to DEST by run.sh, so the GPU machine needs no MPI.
set -eu
dest=$1 tests=$2 benches=$3 mpitests=${4:-}
rm -rf "$dest"
mkdir -p "$dest/tests" "$dest/bench" "$dest/lib"
# glibc, the driver and the big CUDA libraries (hundreds of MiB; the GPU machine
# has them) stay behind, cuDNN too (libtensor opens it at run time). The CUDA runtime (under 1 MiB) travels: the programs
# then run against the runtime they were built with, wherever the machine keeps
# its own.
# libstdc++ and libgcc_s stay too: every machine with the toolkit has them, and
# NCCL there may need a newer libstdc++ than this one (the programs need only
# GLIBCXX_3.4).
skip='^(linux-vdso|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|ld-linux|libresolv|libstdc\+\+|libgcc_s|libcuda\.|libcublas|libnccl|libnvrtc|libcurand|libnvJitLink|libcudnn)'
copy_deps() {
  ldd "$1" 2>/dev/null | awk '/=> \// {print $1, $3}' | while read -r name path; do
    [[ $name =~ $skip ]] && continue
    [ -e "$dest/lib/$name" ] || cp -L "$path" "$dest/lib/$name"
  done
}
for p in $tests; do cp "$p" "$dest/tests/"; copy_deps "$p"; done
for p in $benches; do cp "$p" "$dest/bench/"; copy_deps "$p"; done
if ls "$dest/lib" | grep -q '^libmpi\.so'; then
  plugins=$(pkg-config --variable=libdir ompi-c)/openmpi3
  mkdir -p "$dest/lib/openmpi3"
  # only what a single process needs: no network transports with heavy dependencies
  for f in "$plugins"/*.so; do
    case $(basename "$f") in *ucx*|*ofi*|*psm*|*verbs*|*openib*|*portals*|*cuda*|*usnic*|*ucc*|*hcoll*) continue ;; esac
    cp "$f" "$dest/lib/openmpi3/"
    copy_deps "$f"
  done
  # mpirun (orterun: a single node needs no orted) and what it reads
  # at run time: PMIx's plugins and help texts, Open MPI's help texts
  orterun=$(command -v mpirun 2>/dev/null || true)
  if [ -n "$mpitests" ] && [ -n "$orterun" ]; then
    mkdir -p "$dest/bin" "$dest/share/openmpi" "$dest/share/pmix" "$dest/lib/pmix" "$dest/etc"
    cp -L "$orterun" "$dest/bin/mpirun"
    copy_deps "$dest/bin/mpirun"
    pmix=$(ldd "$plugins"/mca_pmix_*.so 2>/dev/null | awk '/libpmix/ {print $3; exit}')
    if [ -n "$pmix" ]; then
      pdir=$(dirname "$(readlink -f "$pmix")")
      for f in "$pdir"/pmix/*.so; do [ -e "$f" ] && cp "$f" "$dest/lib/pmix/" && copy_deps "$f"; done
      [ -d "$pdir/../share/pmix" ] && cp "$pdir"/../share/pmix/*.txt "$dest/share/pmix/" 2>/dev/null || true
    fi
    datadir=$(ompi_info --path pkgdatadir --parsable 2>/dev/null | sed -n 's/^path:pkgdatadir://p')
    [ -d "${datadir:-/nonexistent}" ] && cp "$datadir"/*.txt "$dest/share/openmpi/" 2>/dev/null || true
    for t in $mpitests; do echo "$t"; done >"$dest/mpi-tests"
  fi
fi
cat >"$dest/run.sh" <<'RUN'
#!/bin/sh
# Runs every GPU test (exit 0 passes, 77 skips: no GPU) and then, with
# "bench" as first argument, the GPU benchmarks. Closing line:
# "gpu tests: N passed, N failed".
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# cuBLAS and NCCL (hundreds of MiB) do not travel: each one the programs need
# and the loader cannot find is looked for in the toolkit's folders, in Python
# wheels (PyTorch's nvidia-* packages), then anywhere under /usr, /opt, /root.
find_lib() {
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu \
      /usr/local/lib $(python3 -c 'import nvidia, os; [print(os.path.join(p, d, "lib")) for p in nvidia.__path__ for d in sorted(os.listdir(p))]' 2>/dev/null); do
    [ -e "$d/$1" ] && { echo "$d/$1"; return; }
  done
  find /usr /opt /root -name "$1" 2>/dev/null | head -n 1
}
for lib in $(ldd "$here"/tests/* "$here"/bench/* 2>/dev/null | awk '/=> not found/ {print $1}' | sort -u); do
  found=$(find_lib "$lib")
  if [ -n "$found" ]; then
    echo "gpu tests: $lib from $found"
    LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$found")"
  else
    echo "gpu tests: $lib not found on this machine; programs that need it will fail to start"
  fi
done
# cuDNN is opened at run time (dlopen), so ldd does not list it: found the same
# way, its folder goes on LD_LIBRARY_PATH; without it attention runs strata's
# own kernel (STRATA_ATTENTION=own asks for that anyway).
found=$(find_lib libcudnn.so.9)
if [ -n "$found" ]; then
  echo "gpu tests: libcudnn.so.9 from $found"
  LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$found")"
else
  echo "gpu tests: libcudnn.so.9 not found on this machine; attention runs strata's own kernel"
fi
export LD_LIBRARY_PATH
# a hung program reports instead of holding the machine (seconds per program)
limit=${STRATA_GPU_TIMEOUT:-600}
tmo=; command -v timeout >/dev/null 2>&1 && tmo="timeout $limit"
export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_mca_base_component_path="$here/lib/openmpi3"
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The bundled mpirun, relocated here: Open MPI's install directories (help
# texts, plugins, its configuration file) and PMIx's plugins.
if [ -x "$here/bin/mpirun" ]; then
  export OPAL_PREFIX="$here" OPAL_EXEC_PREFIX="$here" OPAL_BINDIR="$here/bin" OPAL_LIBDIR="$here/lib"
  export OPAL_PKGLIBDIR="$here/lib/openmpi3" OPAL_DATADIR="$here/share" OPAL_DATAROOTDIR="$here/share"
  export OPAL_PKGDATADIR="$here/share/openmpi" OPAL_SYSCONFDIR="$here/etc"
  export PMIX_MCA_mca_base_component_path="$here/lib/pmix" PMIX_INSTALL_PREFIX="$here"
  export OMPI_MCA_rmaps_base_oversubscribe=1
fi
if [ "${1:-}" = bench ]; then
  for b in "$here"/bench/*; do [ -x "$b" ] && $tmo "$b"; done
  exit 0
fi
pass=0 fail=0 skip=0
for t in "$here"/tests/*; do
  [ -x "$t" ] || continue
  $tmo "$t"; rc=$?
  case $rc in
  0) pass=$((pass + 1)) ;;
  77) skip=$((skip + 1)) ;;
  124) fail=$((fail + 1)); echo "FAIL $(basename "$t") (no result within $limit s)" ;;
  *) fail=$((fail + 1)); echo "FAIL $(basename "$t") (exit $rc)" ;;
  esac
done
# The multi-rank tests again with 2 (or N) ranks sharing the GPU(s), where there is
# an mpirun (the bundled one, else the machine's). mpirun's own --timeout
# ends a hung job (exit 110 here: a failure).
mpirun=
[ -x "$here/bin/mpirun" ] && mpirun="$here/bin/mpirun"
[ -z "$mpirun" ] && command -v mpirun >/dev/null 2>&1 && mpirun=$(command -v mpirun)
if [ -s "$here/mpi-tests" ] && [ -n "$mpirun" ]; then
  for entry in $(cat "$here/mpi-tests"); do
    name=${entry%%:*} np=2 # (NAME:N: N ranks)
    [ "$entry" != "$name" ] && np=${entry#*:}
    t="$here/tests/$name"
    [ -x "$t" ] || continue
    echo "gpu tests: $name with $np ranks under mpirun"
    env -u OMPI_MCA_ess_singleton_isolated "$mpirun" -np "$np" --bind-to none --timeout "$limit" "$t"; rc=$?
    case $rc in
    0) pass=$((pass + 1)) ;;
    77) skip=$((skip + 1)) ;;
    *) fail=$((fail + 1)); echo "FAIL $name, $np ranks (exit $rc)" ;;
    esac
  done
elif [ -s "$here/mpi-tests" ]; then
  echo "gpu tests: no mpirun here: the 2-rank runs of $(tr '\n' ' ' <"$here/mpi-tests")are skipped"
fi
echo "gpu tests: $pass passed, $fail failed, $skip skipped"
[ $fail = 0 ]
RUN
chmod +x "$dest/run.sh"
echo "strata: GPU bundle in $dest ($(du -sh "$dest" | cut -f1)); run $dest/run.sh on the GPU machine"
