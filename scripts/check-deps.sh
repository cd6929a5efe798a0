#!/usr/bin/env bash
# The dependency DAG of DESIGN.md, checked on the sources: libcomm, libtensor,
# liboptim and liboffload include no other strata library's header.
set -u
bad=0
for lib in comm tensor optim offload; do
  d=lib$lib; [ -d "$d" ] || continue
  for other in comm tensor optim offload parallel; do
    [ "$other" = "$lib" ] && continue
    if grep -rnE "#include *[<\"](strata/)?$other\.h[>\"]" "$d"; then
      echo "check-deps: lib$lib must not include $other.h (DESIGN.md dependency rules)" >&2; bad=1
    fi
  done
done
exit $bad
