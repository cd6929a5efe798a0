#!/usr/bin/env bash
# write-pc.sh PREFIX NAME LIBNAME VERSION "REQUIRES" "PRIVATE_LIBS": prints a .pc file.
set -eu
prefix=$1 name=$2 lib=${3#lib} version=$4 requires=$5 private=$6
cat <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: $name
Description: strata lib${name#strata-} (a C toolkit for training large transformers)
Version: $version
Requires: $requires
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -l$lib
Libs.private: $private -lm
Cflags: -I\${includedir}
PC
