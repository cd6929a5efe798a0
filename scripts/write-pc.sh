#!/usr/bin/env bash
# write-pc.sh PREFIX NAME LIBNAME VERSION "REQUIRES" "REQUIRES_PRIVATE" "PRIVATE_LIBS":
# prints a .pc file. REQUIRES: the modules the library's public headers
# include (a consumer compiles against them); REQUIRES_PRIVATE and
# PRIVATE_LIBS: what only the static archive needs at link time (the shared
# library records its own), read by `pkg-config --static --libs`. Cflags
# carry no compiler mode (no -fopenmp): a consumer compiles as it likes.
set -eu
prefix=$1 name=$2 lib=${3#lib} version=$4 requires=$5 requires_private=$6 private=$7
cat <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: $name
Description: strata lib${name#strata-} (a C toolkit for training large transformers)
Version: $version
Requires: $requires
Requires.private: $requires_private
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -l$lib
Libs.private: $private -lm
Cflags: -I\${includedir}
PC
